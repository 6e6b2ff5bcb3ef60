"""The public test kit: a fake clock that moves only when told.

    clock = FakeClock()
    with JobScheduler(num_workers=1, clock=clock) as s:
        s.schedule(job, delay_seconds=5)
        clock.advance(5)            # the job is now due and is handed to a worker

Every due decision and every wait of a scheduler built with a ``FakeClock`` follows it:
a dispatcher sleeping until t=5 wakes exactly when ``advance`` reaches 5, not before.
"""

from __future__ import annotations

import threading

from scheduler import validation


class FakeClock:
    """A manually advanced clock. ``now()`` and ``wall()`` both return the fake time."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = validation.finite(start, "FakeClock(start)")
        self._lock = threading.Lock()
        # sleeper id -> (deadline or None, condition it waits on)
        self._sleepers: dict[int, tuple[float | None, threading.Condition]] = {}
        self._next_id = 0

    def now(self) -> float:
        with self._lock:
            return self._now

    def wall(self) -> float:
        return self.now()

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every waiter whose deadline has been reached.

        Returns once those waiters have been notified (they run on their own threads)."""
        # a NaN made every later due decision fail ("cannot convert float NaN to integer")
        seconds = validation.finite(seconds, "advance()")
        if seconds < 0:
            raise ValueError(f"a clock cannot go back: advance({seconds!r})")
        with self._lock:
            self._now += seconds
            woken = [
                (sid, cond)
                for sid, (deadline, cond) in self._sleepers.items()
                if deadline is not None and deadline <= self._now
            ]
            for sid, _ in woken:
                del self._sleepers[sid]
        for _, cond in woken:
            with cond:
                cond.notify_all()

    def wait_until(self, cond: threading.Condition, deadline: float | None) -> None:
        """Wait on ``cond`` until notified, or until fake time reaches ``deadline``."""
        with self._lock:
            if deadline is not None and deadline <= self._now:
                return
            sid = self._next_id
            self._next_id += 1
            self._sleepers[sid] = (deadline, cond)
        try:
            cond.wait()
        finally:
            with self._lock:
                self._sleepers.pop(sid, None)

    def sleepers(self) -> int:
        """How many threads are waiting on this clock right now."""
        with self._lock:
            return len(self._sleepers)
