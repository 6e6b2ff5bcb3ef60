"""Clocks: where every due decision and every wait of an engine gets its time.

A clock both *reads* time and *waits* on a condition variable, so a fake clock can
control the waits too (see :class:`scheduler.testing.FakeClock`).
"""
from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """The time source of one engine.

    ``now()`` is monotonic seconds (due times, leases, timeouts); ``wall()`` is epoch
    seconds, used only to turn an absolute ``at=`` time into a due time.
    """

    def now(self) -> float: ...

    def wall(self) -> float: ...

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Block on ``cond`` (whose lock the caller holds) for at most ``timeout`` seconds
        of this clock's time, or until notified. ``None`` waits for a notification only.
        May return early (spurious wake-up): callers re-check their predicate."""
        ...


class MonotonicClock:
    """The default clock: ``time.monotonic`` for waits and due times."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        if timeout is None:
            cond.wait()
        elif timeout > 0:
            cond.wait(timeout)
