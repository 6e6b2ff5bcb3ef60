"""Lanes: named, separately bounded pools, so long jobs in one lane cannot starve another."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

from scheduler import validation
from workers.pool import WorkerPool, remaining

T = TypeVar("T")


class Lanes(Generic[T]):
    def __init__(
        self,
        sizes: Mapping[str, int],
        run: Callable[[T], None],
        on_free: Callable[[], None],
        refill: Callable[[str], T | None] | None = None,
        *,
        lookahead: float = 0.0,
        on_idle: Callable[[], None] = lambda: None,
        on_drained: Callable[[], None] | None = None,
        on_exit: Callable[[], None] = lambda: None,
        runs: Mapping[str, Callable[[T], None]] | None = None,
    ) -> None:
        """See ``WorkerPool`` for ``refill``, ``lookahead``, ``on_idle``, ``on_drained``
        and ``on_exit``. ``runs``: a lane's own ``run`` (a process lane's), by name."""
        if not sizes:
            raise ValueError("at least one lane is needed")
        self._pools: dict[str, WorkerPool[T]] = {}
        try:
            for lane, size in sizes.items():
                self._pools[validation.name(lane, "lane name")] = WorkerPool(
                    lane,
                    size,
                    (runs or {}).get(lane, run),
                    on_free,
                    refill,
                    lookahead=lookahead,
                    on_idle=on_idle,
                    on_drained=on_drained,
                    on_exit=on_exit,
                )
        except BaseException:  # a lane refused: the lanes already started stop again
            for pool in self._pools.values():
                pool.close()
            raise

    def __contains__(self, lane: object) -> bool:
        return lane in self._pools

    def names(self) -> list[str]:
        return list(self._pools)

    def capacity(self) -> dict[str, int]:
        """Free workers per lane, right now (plus each lane's look-ahead, if any)."""
        return {lane: pool.free() for lane, pool in self._pools.items()}

    def submit(self, lane: str, item: T) -> None:
        self._pools[lane].submit(item)

    def submit_many(self, lane: str, items: Sequence[T]) -> None:
        """Queue ``items`` on ``lane`` in order, with one wake-up (see ``WorkerPool``)."""
        self._pools[lane].submit_many(items)

    def busy(self) -> int:
        return sum(p.busy() for p in self._pools.values())

    def load(self) -> dict[str, tuple[int, int]]:
        """Per lane: its workers, and the items running on them or queued for them."""
        return {lane: (pool.size, pool.busy()) for lane, pool in self._pools.items()}

    def remove(self, match: Callable[[T], bool]) -> list[T]:
        """Queued, unstarted items that ``match``, taken out of every lane's queue."""
        return [item for pool in self._pools.values() for item in pool.remove(match)]

    def close(self) -> list[T]:
        return [item for pool in self._pools.values() for item in pool.close()]

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Every lane idle within ``timeout`` seconds in all. False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return all(pool.wait_idle(remaining(deadline)) for pool in self._pools.values())

    def join(self, timeout: float | None = None) -> bool:
        """Every lane's threads exited within ``timeout`` seconds in all (each lane is
        waited for even after one timed out, for no longer than what is left)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return all([pool.join(remaining(deadline)) for pool in self._pools.values()])
