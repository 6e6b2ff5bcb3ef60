"""One timer thread per engine, on the engine's clock: job timeouts and lease heartbeats.

Started on first use, so an engine with no timeouts and no leases has no timer thread.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable

from scheduler.clock import Clock

log = logging.getLogger("duetime.workers")


class Timers:
    def __init__(self, clock: Clock, name: str = "duetime-timers") -> None:
        self._clock = clock
        self._name = name
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._live: set[int] = set()  # ids scheduled and neither run nor cancelled
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def call_later(self, delay: float, fn: Callable[[], None]) -> int:
        """Run ``fn`` on the timer thread after ``delay`` seconds of the clock; returns an id
        for ``cancel``. ``fn`` must be quick (it delays every other timer)."""
        with self._cond:
            tid = next(self._ids)
            if self._closed:
                return tid
            heapq.heappush(self._heap, (self._clock.now() + delay, tid, fn))
            self._live.add(tid)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            elif self._heap[0][1] == tid:
                self._cond.notify()
            return tid

    def cancel(self, tid: int) -> None:
        with self._cond:
            self._live.discard(tid)
            if len(self._heap) > 64 and len(self._live) * 2 < len(self._heap):
                self._heap = [e for e in self._heap if e[1] in self._live]
                heapq.heapify(self._heap)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    deadline = None
                    if self._heap:
                        due, tid, fn = self._heap[0]
                        if tid not in self._live:
                            heapq.heappop(self._heap)
                            continue
                        if due <= self._clock.now():
                            heapq.heappop(self._heap)
                            self._live.discard(tid)
                            break
                        deadline = due
                    self._clock.wait_until(self._cond, deadline)
            try:
                fn()
            except Exception:
                log.exception("timer callback failed")


class Offloaded:
    """Runs ``fn`` on its own thread whenever ``kick()`` is called (kicks that arrive while
    it runs coalesce into one more run). A timer callback that does I/O kicks one of
    these instead of blocking the timer thread, whose other timers (job timeouts,
    heartbeats, ack deadlines) would otherwise wait behind a slow store."""

    def __init__(self, fn: Callable[[], None], name: str) -> None:
        self._fn = fn
        self._name = name
        self._cond = threading.Condition()
        self._kicked = False
        self._busy = False  # fn runs
        self._thread: threading.Thread | None = None

    def kick(self) -> None:
        """Ask for one run of ``fn`` soon; returns at once."""
        with self._cond:
            self._kicked = True
            self._cond.notify()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()

    def idle(self, timeout: float) -> bool:
        """Wait until no run is asked for or running; False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not (self._kicked or self._busy), timeout)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._kicked:
                    self._cond.wait()
                self._kicked, self._busy = False, True
            try:
                self._fn()
            except Exception:
                log.exception("%s failed", self._name)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
