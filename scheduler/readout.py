"""The facades' read-out of dispatch delay, with no optional dependency: ``stats()``.

Dispatch lag is the time from when an invocation became claimable (its due time, or the
moment it was enqueued, retried or resumed if that is later: a job given a time already
past is not "late") to its claim, in the store's clock. ``LagWindow`` keeps the last
``WINDOW`` lags of each lane; recording one is an append under a lock (well under a
microsecond per job, measured in docs/guarantees.md). What waits in each lane comes from
the store (``QueueDepths``) and the engine's pools at the moment ``stats()`` is called.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.metrics import Metrics

WINDOW = 5000  # lags kept per lane: the "recent claims" the percentiles cover


@dataclass(frozen=True)
class Lag:
    """Dispatch lag in seconds over ``samples`` recent claims (all 0.0 when there are
    none): nearest-rank percentiles and the maximum."""

    samples: int
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, lags: Iterable[float]) -> Lag:
        values = sorted(lags)
        n = len(values)
        if not n:
            return cls(0, 0.0, 0.0, 0.0, 0.0)

        def pct(p: float) -> float:
            return values[min(n - 1, int(p * n))]

        return cls(n, pct(0.50), pct(0.90), pct(0.99), values[-1])


@dataclass(frozen=True)
class LaneStats:
    """One lane now: ``workers`` (its pool size), ``busy`` (invocations running on them
    or handed to them), ``queued`` (pending in the store, due or not), ``due`` (of those,
    due already: waiting for a free worker), and the ``lag`` of its recent claims."""

    workers: int
    busy: int
    queued: int
    due: int
    lag: Lag


@dataclass(frozen=True)
class Stats:
    """``lag`` over the recent claims of every lane, and each lane's ``LaneStats``;
    ``loop_lag``: over recent ``async def`` jobs, how long each one's code kept its event
    loop from running callbacks (``Scheduler.loop_lag``; 0 samples: no async job ran)."""

    lag: Lag
    lanes: dict[str, LaneStats]
    loop_lag: Lag = Lag(0, 0.0, 0.0, 0.0, 0.0)


class LagWindow(Metrics):
    """Engine metrics that keep the last ``window`` dispatch lags per lane."""

    def __init__(self, window: int = WINDOW) -> None:
        self._window = window
        self._lock = threading.Lock()
        self._lags: dict[str, deque[float]] = {}

    def claimed(self, lane: str, lag: float) -> None:
        with self._lock:
            recent = self._lags.get(lane)
            if recent is None:
                recent = self._lags[lane] = deque(maxlen=self._window)
            recent.append(lag if lag > 0.0 else 0.0)

    def claimed_many(self, lags: Sequence[tuple[str, float]]) -> None:
        with self._lock:  # one lock hold per batch
            for lane, lag in lags:
                recent = self._lags.get(lane)
                if recent is None:
                    recent = self._lags[lane] = deque(maxlen=self._window)
                recent.append(lag if lag > 0.0 else 0.0)

    def recent(self) -> dict[str, list[float]]:
        """A copy of the recent lags, per lane."""
        with self._lock:
            return {lane: list(lags) for lane, lags in self._lags.items()}


def build(
    lags: Mapping[str, list[float]],
    load: Mapping[str, tuple[int, int]],
    depths: Mapping[str, tuple[int, int]],
    loop_lag: Lag | None = None,
) -> Stats:
    """``Stats`` from the lags per lane, each lane's (workers, busy) and each lane's
    (queued, due) in the store. Lanes of the store that this engine does not serve are
    left out (another engine's work)."""
    lanes = {
        lane: LaneStats(
            workers=workers,
            busy=busy,
            queued=depths.get(lane, (0, 0))[0],
            due=depths.get(lane, (0, 0))[1],
            lag=Lag.of(lags.get(lane, ())),
        )
        for lane, (workers, busy) in load.items()
    }
    overall = Lag.of(x for lane in load for x in lags.get(lane, ()))
    return Stats(overall, lanes, loop_lag or Lag.of(()))
