"""A replica's per-minute figures, written to its shared namespace for the web console's
charts (``stores/redis/reading/console_history.py``): counts and dispatch lag per minute, and the
replica's announcement (version, heartbeat).

``Recorder`` is a ``Metrics`` wrapper: each hook adds to in-memory counters (no store call
per job), then forwards to what it wraps. A daemon thread flushes every ``minutes.FLUSH``
seconds in one pipeline; a failed flush is logged and its counts are kept for the next.
``close()`` flushes once more and withdraws the announcement.

    recorder = Recorder(signals, store, owner, workers=8)
    engine = Scheduler(..., metrics=recorder)
    recorder.start()
    ...
    recorder.close()
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduler.metrics import Metrics, Run
from scheduler.signals import MAX_SAMPLES, percentile

log = logging.getLogger("duetime.recorder")


class Recorder(Metrics):
    """Counts claims and outcomes per minute of wall time and keeps up to
    ``MAX_SAMPLES`` lag samples of the current minute; ``flush`` writes them."""

    def __init__(
        self,
        inner: Metrics,
        store: Any,
        owner: str,
        *,
        workers: int = 0,
        lanes: Mapping[str, int] | None = None,
        wall: Callable[[], float] = time.time,
        every: float | None = None,
        resync: float | None = None,
    ) -> None:
        from scheduler import __version__
        from scheduler.stores.redis.reading import console_history

        self.inner, self.store, self.owner = inner, store, owner
        self._wall = wall
        self._every = console_history.FLUSH if every is None else every
        self._lock = threading.Lock()
        self._minute = int(wall() // 60)
        self._counts: dict[str, int] = {}  # the current minute's, since the last flush
        self._lags: list[float] = []  # the current minute's lag samples (ms)
        self._pending: list[tuple[int, dict[str, int], dict[str, float | None]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._info: dict[str, Any] = {
            "version": __version__,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": round(wall(), 3),
            "workers": workers,
        }
        if lanes is not None:  # which lanes it serves: `duetime stats` names unserved ones
            self._info["lanes"] = dict(lanes)
        if resync is not None:  # how often it claims at least: readouts judge it alive by it
            self._info["resync"] = resync

    # ---- the hooks: counted, then forwarded -----------------------------------------------

    def claimed(self, lane: str, lag: float) -> None:
        with self._lock:
            self._roll()
            self._counts["claims"] = self._counts.get("claims", 0) + 1
            if len(self._lags) < MAX_SAMPLES:
                self._lags.append(lag * 1000)
        self.inner.claimed(lane, lag)

    def claimed_many(self, lags: Sequence[tuple[str, float]]) -> None:
        with self._lock:  # one lock hold per batch
            self._roll()
            self._counts["claims"] = self._counts.get("claims", 0) + len(lags)
            room = MAX_SAMPLES - len(self._lags)
            self._lags.extend(lag * 1000 for _, lag in lags[: max(0, room)])
        self.inner.claimed_many(lags)

    def finished(self, lane: str, outcome: str) -> None:
        if outcome in ("succeeded", "failed", "retried"):
            with self._lock:
                self._roll()
                self._counts[outcome] = self._counts.get(outcome, 0) + 1
        self.inner.finished(lane, outcome)

    def ran(self, lane: str, task: str, outcome: str, seconds: float, waited: float) -> None:
        self.inner.ran(lane, task, outcome, seconds, waited)

    def succeeded_many(self, runs: Sequence[Run]) -> None:
        with self._lock:  # one lock hold per batch
            self._roll()
            self._counts["succeeded"] = self._counts.get("succeeded", 0) + len(runs)
        self.inner.succeeded_many(runs)

    def renewed(self, count: int) -> None:
        self.inner.renewed(count)

    def lease_lost(self, count: int) -> None:
        self.inner.lease_lost(count)

    def claim_round(self, error: BaseException | None) -> None:
        self.inner.claim_round(error)

    def loop_lag(self, lane: str, seconds: float) -> None:
        self.inner.loop_lag(lane, seconds)

    def loop_lag_many(self, lags: Sequence[tuple[str, float]]) -> None:
        self.inner.loop_lag_many(lags)

    # ---- flushing ---------------------------------------------------------------------------

    def _roll(self) -> None:
        """A new minute began: set the last one's figures aside for the flush (lock held)."""
        now = int(self._wall() // 60)
        if now != self._minute:
            self._pending.append((self._minute, self._counts, self._percentiles()))
            self._minute, self._counts, self._lags = now, {}, []

    def _percentiles(self) -> dict[str, float | None]:
        lags = sorted(self._lags)
        return {"lag_p50": percentile(lags, 0.5), "lag_p99": percentile(lags, 0.99)}

    def flush(self) -> None:
        """Write what was counted since the last flush (finished minutes, then the current
        one's counts so far with its lag percentiles so far) and the heartbeat. A flush
        that fails is logged; its counts are written by the next one."""
        from scheduler.stores.redis.reading import console_history

        with self._lock:
            self._roll()
            batches = [*self._pending, (self._minute, self._counts, self._percentiles())]
            self._pending, self._counts = [], {}  # the minute's lag samples stay
        now = self._wall()
        info = {**self._info, "heartbeat": round(now, 3)}
        done = 0
        try:
            for minute, counts, lags in batches:
                console_history.record(
                    self.store, self.owner, minute, counts, lags, info, now - console_history.KEEP
                )
                done += 1
        except Exception as exc:  # noqa: BLE001 - a chart's figures never stop a replica
            full = type(exc).__name__ == "OutOfMemoryError" or "maxmemory" in str(exc)
            why = "Redis is out of memory (maxmemory); they wait for room" if full else exc
            log.warning("could not write the per-minute figures: %s", why)
            with self._lock:  # written by the next flush, in order
                self._pending[:0] = batches[done:]
                del self._pending[: -24 * 60]  # a day of minutes at most

    def start(self) -> None:
        """Flush every ``every`` seconds on a daemon thread until ``close``."""
        self.flush()
        self._thread = threading.Thread(target=self._run, name="duetime-recorder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.flush()

    def close(self) -> None:
        """Flush once more and withdraw the announcement (best effort)."""
        from scheduler.stores.redis.reading import console_history

        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.flush()
        try:
            console_history.forget(self.store, self.owner)
        except Exception as exc:  # noqa: BLE001
            log.warning("could not withdraw the replica's announcement: %s", exc)
