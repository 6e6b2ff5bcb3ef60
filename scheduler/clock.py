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

    def wait_until(self, cond: threading.Condition, deadline: float | None) -> None:
        """Block on ``cond`` (whose lock the caller holds) until this clock reaches
        ``deadline`` (absolute, in ``now()`` time) or ``cond`` is notified; ``None`` waits
        for a notification only. Returns at once if the deadline has passed. May return
        early (spurious wake-up): callers re-check their predicate. An absolute deadline
        (not a timeout) means time that passes between the caller's ``now()`` and the
        wait cannot make it oversleep."""
        ...


MAX_WAIT = 86_400.0  # seconds one wait may block before its caller looks again


class MonotonicClock:
    """The default clock: ``time.monotonic`` for waits and due times."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def wait_until(self, cond: threading.Condition, deadline: float | None) -> None:
        if deadline is None:
            cond.wait()
            return
        timeout = deadline - time.monotonic()
        if timeout > 0:  # capped: a wait of ~300 years overflowed time_t in the dispatcher
            cond.wait(min(timeout, MAX_WAIT))
