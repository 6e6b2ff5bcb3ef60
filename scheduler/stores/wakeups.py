"""The wake-up subscription of a Redis-backed store: listeners, and the one subscriber
thread that serves them (started with the first listener, stopped with the last).

A store subclasses ``WakeSubscriptions``, calls ``_init_subscriptions()`` and provides
``_subscriber`` (the thread's loop: subscribe, set ``_sub_ready``, read until ``_sub_stop``,
call ``_notify``; keep the PubSub in ``_pubsub`` so a stop can break its blocked read)."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from scheduler.stores.base import WakeListener

log = logging.getLogger("duetime.redis")


class WakeSubscriptions:
    namespace: str

    def _init_subscriptions(self) -> None:
        self._listeners: list[WakeListener] = []
        self._sub_lock = threading.Lock()
        self._sub_thread: threading.Thread | None = None
        self._sub_stop = threading.Event()
        self._sub_ready = threading.Event()
        self._pubsub: Any = None

    def _subscriber(self) -> None:
        raise NotImplementedError

    def subscribe(self, listener: WakeListener) -> Callable[[], None]:
        """Call ``listener(due_in)`` on every wake-up; returns the unsubscribe function.
        Returns once the channel is subscribed (or after 5 s: resync covers the gap)."""
        with self._sub_lock:
            self._listeners.append(listener)
            if self._sub_thread is None:
                self._sub_stop.clear()
                self._sub_thread = threading.Thread(
                    target=self._subscriber, name=f"duetime-wake-{self.namespace}",
                    daemon=True)
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
