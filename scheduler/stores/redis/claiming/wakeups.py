"""The wake-up subscription of a Redis-backed store: listeners, and the one subscriber
thread that serves them (started with the first listener, stopped with the last).

A store subclasses ``WakeSubscriptions``, calls ``_init_subscriptions()``, has its client
in ``_r`` and provides ``_wake_channels`` and ``_on_wake`` (plus, optionally,
``_on_subscribed`` and ``_on_lost``). The subscriber thread keeps one connection
subscribed to every channel: after each (re)connection the listeners are told to look
(wake-ups may have been missed meanwhile); a lost connection or a failover (the primary
moved) is retried with a capped exponential backoff."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from scheduler.stores.base import WakeListener
from scheduler.stores.redis.protocol import urls

log = logging.getLogger("duetime.redis")


class WakeSubscriptions:
    namespace: str
    _r: Any

    def _init_subscriptions(self) -> None:
        self._listeners: list[WakeListener] = []
        self._sub_lock = threading.Lock()
        self._sub_thread: threading.Thread | None = None
        self._sub_stop = threading.Event()
        self._sub_ready = threading.Event()
        self._pubsub: Any = None

    def _wake_channels(self) -> list[str]:
        raise NotImplementedError

    def _on_wake(self, channel: str, due_ms: int) -> None:
        """A wake-up message: ``due_ms`` (Redis time) is the new earliest due time."""
        raise NotImplementedError

    def _on_subscribed(self) -> None:
        """Every channel is subscribed (again); runs before the listeners are told."""

    def _on_lost(self) -> None:
        """The subscription was lost; wake-ups are missed until it is back."""

    def _subscriber(self) -> None:
        channels = self._wake_channels()
        backoff = 0.05
        while not self._sub_stop.is_set():
            pubsub = self._pubsub = self._r.pubsub()
            try:
                pubsub.subscribe(*channels)
                confirmed = 0
                while confirmed < len(channels):
                    msg = pubsub.get_message(timeout=1.0)
                    if self._sub_stop.is_set():
                        return
                    confirmed += msg is not None and msg.get("type") == "subscribe"
                self._on_subscribed()
                self._sub_ready.set()
                self._notify(0.0)  # we may have missed wake-ups while (re)connecting
                backoff = 0.05
                while not self._sub_stop.is_set():
                    msg = pubsub.get_message(timeout=1.0)
                    if msg is not None and msg.get("type") == "message":
                        self._on_wake(msg["channel"], int(msg["data"]))
                    elif urls.primary_moved(self._r, pubsub.connection):
                        raise ConnectionError("the primary changed (failover): resubscribing")
            except Exception as exc:  # connection lost: back off, reconnect, resync
                self._on_lost()
                if self._sub_stop.is_set():
                    return
                log.warning("wake-up channel(s) lost (%s); reconnecting in %.2fs", exc, backoff)
                self._sub_stop.wait(backoff)
                backoff = min(5.0, backoff * 2)
            finally:
                try:
                    pubsub.close()
                except Exception:
                    pass

    def subscribe(self, listener: WakeListener) -> Callable[[], None]:
        """Call ``listener(due_in)`` on every wake-up; returns the unsubscribe function.
        Returns once the channel is subscribed (or after 5 s: resync covers the gap)."""
        with self._sub_lock:
            self._listeners.append(listener)
            if self._sub_thread is None:
                self._sub_stop.clear()
                self._sub_thread = threading.Thread(
                    target=self._subscriber, name=f"duetime-wake-{self.namespace}", daemon=True
                )
                self._sub_thread.start()
            ready = self._sub_ready
        if not ready.wait(5):
            log.warning("wake-up channel not subscribed yet; relying on resync until it is")

        def unsubscribe() -> None:
            with self._sub_lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)
                stop = not self._listeners and self._sub_thread is not None
                thread, self._sub_thread = self._sub_thread, (None if stop else self._sub_thread)
            if stop and thread is not None:
                self._stop_subscriber(thread)

        return unsubscribe

    def _stop_subscriber(self, thread: threading.Thread) -> None:
        self._sub_stop.set()
        pubsub = self._pubsub
        if pubsub is not None and pubsub.connection is not None:
            try:  # wake the blocked read at once instead of waiting for its timeout
                pubsub.connection.disconnect()
            except Exception:
                pass
        thread.join(5)

    def _close_subscriptions(self) -> None:
        """Forget every listener and stop the subscriber thread (the store is closing)."""
        with self._sub_lock:
            thread, self._sub_thread = self._sub_thread, None
            self._listeners.clear()
        if thread is not None:
            self._stop_subscriber(thread)

    def _notify(self, due_in: float | None) -> None:
        """Tell every listener (outside the lock: a listener may subscribe or leave)."""
        with self._sub_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(due_in)
