"""``python -m tests.integration.shifted OFFSET_SECONDS run ...``: a replica that lives
OFFSET seconds in the future (or past) *together with its Redis store*: the scripts are
told "now" = real time + OFFSET instead of reading Redis TIME. Every process of a test
started with the same offset agrees on that time, so a fleet can run through a real
daylight-saving change today."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from scheduler.stores import redis as redis_store


class OffsetClock:
    """Wall time shifted by a fixed offset; waits are real (monotonic) waits."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def now(self) -> float:
        return time.time() + self.offset

    def wall(self) -> float:
        return self.now()

    def wait_until(self, cond: threading.Condition, deadline: float | None) -> None:
        if deadline is None:
            cond.wait()
        elif (timeout := deadline - self.now()) > 0:
            cond.wait(timeout)


def install(offset: float) -> None:
    """Make every RedisStore built from now on use the shifted clock."""
    original = redis_store.RedisStore.__init__

    def init(self: Any, *args: Any, **kw: Any) -> None:
        kw.setdefault("clock", OffsetClock(offset))
        original(self, *args, **kw)

    redis_store.RedisStore.__init__ = init  # type: ignore[method-assign]


if __name__ == "__main__":
    install(float(sys.argv.pop(1)))
    from scheduler.cli import main

    main()
