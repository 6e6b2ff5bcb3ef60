"""What a replica tells its operator besides metrics: a one-line summary per period in
its log, and its readiness (``/readyz``). Both come from the engine's metric hooks
(``scheduler.metrics.Metrics``): a few counters and samples kept in memory, no store call
per job and none to report (``duetime run`` logs the summary from its main thread).

    signals = Signals(PrometheusMetrics(...))     # forwards every hook to what it wraps
    engine = Scheduler(..., metrics=signals)
    signals.log_summary()                         # every 60 s: the period since the last
    signals.ready()                               # (True, "...") or (False, "why")
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

from scheduler.clock import Clock, MonotonicClock
from scheduler.errors import LayoutRefusedError
from scheduler.metrics import Metrics, Run

log = logging.getLogger("duetime.summary")

MAX_SAMPLES = 20_000  # lag and wait samples kept per period (a uniform sample beyond)
OUTCOMES = ("succeeded", "failed", "retried", "timeout", "lease_lost", "unknown_task")


def percentile(sorted_values: list[float], q: float) -> float | None:
    """The ``q``-quantile (0..1) of sorted values, nearest rank; None when empty."""
    if not sorted_values:
        return None
    rank = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values) - 1e-9) - 1))
    return sorted_values[rank]


class _Sample:
    """Up to MAX_SAMPLES values, a uniform sample of all that were offered (reservoir)."""

    def __init__(self, rng: random.Random) -> None:
        self.values: list[float] = []
        self.seen = 0
        self._rng = rng

    def add(self, value: float) -> None:
        self.seen += 1
        if len(self.values) < MAX_SAMPLES:
            self.values.append(value)
        else:
            i = self._rng.randrange(self.seen)
            if i < MAX_SAMPLES:
                self.values[i] = value

    def add_many(self, values: list[float]) -> None:
        """``add`` of each value, in order (while there is room: one ``extend``)."""
        room = MAX_SAMPLES - len(self.values)
        if room >= len(values):
            self.seen += len(values)
            self.values.extend(values)
            return
        for value in values:
            self.add(value)


class Signals(Metrics):
    """Counts what the hooks report, then forwards each call to ``inner``. ``ready()``:
    a claim round reached the store within ``ready_within`` seconds (of ``clock``) and
    the last one did not fail. ``on_refused(error)``, if set, hears of the refusal that
    stopped claiming for good (``LayoutRefusedError``: the dispatcher's loop ended)."""

    def __init__(
        self,
        inner: Metrics | None = None,
        *,
        clock: Clock | None = None,
        ready_within: float = 15.0,
        owner: str = "",
        rng: random.Random | None = None,
    ) -> None:
        self.inner = inner or Metrics()
        self._clock = clock or MonotonicClock()
        self._ready_within = ready_within
        self._owner = owner
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._ok_at: float | None = None  # clock time of the last claim round that worked
        self._error: tuple[float, str] | None = None  # the last failed round, if later
        self._stopping = False
        self.on_refused: Callable[[BaseException], None] | None = None
        self._reset(self._clock.now())

    def _reset(self, now: float) -> None:
        self._since = now
        self._counts = dict.fromkeys(OUTCOMES, 0)
        self._lags = _Sample(self._rng)
        self._waits = _Sample(self._rng)
        self._losses = 0

    # ---- the hooks ----------------------------------------------------------------------

    def claimed(self, lane: str, lag: float) -> None:
        with self._lock:
            self._lags.add(lag)
        self.inner.claimed(lane, lag)

    def claimed_many(self, lags: Sequence[tuple[str, float]]) -> None:
        values = [lag for _, lag in lags]
        with self._lock:  # one lock hold per batch
            self._lags.add_many(values)
        self.inner.claimed_many(lags)

    def finished(self, lane: str, outcome: str) -> None:
        with self._lock:
            self._counts[outcome] = self._counts.get(outcome, 0) + 1
        self.inner.finished(lane, outcome)

    def ran(self, lane: str, task: str, outcome: str, seconds: float, waited: float) -> None:
        with self._lock:
            self._waits.add(waited)
        self.inner.ran(lane, task, outcome, seconds, waited)

    def succeeded_many(self, runs: Sequence[Run]) -> None:
        waits = [run.waited for run in runs]
        with self._lock:  # one lock hold per batch
            self._counts["succeeded"] += len(runs)
            self._waits.add_many(waits)
        self.inner.succeeded_many(runs)

    def renewed(self, count: int) -> None:
        self.inner.renewed(count)

    def lease_lost(self, count: int) -> None:
        with self._lock:
            self._losses += count
        self.inner.lease_lost(count)

    def loop_lag(self, lane: str, seconds: float) -> None:
        self.inner.loop_lag(lane, seconds)

    def loop_lag_many(self, lags: Sequence[tuple[str, float]]) -> None:
        self.inner.loop_lag_many(lags)

    def claim_round(self, error: BaseException | None) -> None:
        now = self._clock.now()
        with self._lock:
            if error is None:
                self._ok_at, self._error = now, None
            else:
                self._error = (now, f"{type(error).__name__}: {error}")
        self.inner.claim_round(error)
        if isinstance(error, LayoutRefusedError) and self.on_refused is not None:
            self.on_refused(error)

    # ---- what they add up to --------------------------------------------------------------

    def stopping(self) -> None:
        """The replica is shutting down: no longer ready."""
        self._stopping = True

    def ready(self) -> tuple[bool, str]:
        """(True, why) if the last claim round worked, within ``ready_within`` seconds."""
        now = self._clock.now()
        with self._lock:
            ok_at, error = self._ok_at, self._error
        if self._stopping:
            return False, "shutting down"
        if error is not None:
            return False, f"the last claim round failed {now - error[0]:.1f}s ago: {error[1]}"
        if ok_at is None:
            return False, "no claim round has reached the store yet"
        if now - ok_at > self._ready_within:
            return False, (
                f"the last claim round that reached the store was {now - ok_at:.1f}s ago "
                f"(more than {self._ready_within:g}s)"
            )
        return True, f"the last claim round reached the store {now - ok_at:.1f}s ago"

    def take(self) -> dict[str, Any]:
        """The figures of the period since the last ``take`` (and start a new one)."""
        now = self._clock.now()
        with self._lock:
            since, counts, lags, waits, losses = (
                self._since,
                self._counts,
                self._lags,
                self._waits,
                self._losses,
            )
            self._reset(now)
        lag, wait = sorted(lags.values), sorted(waits.values)
        return {
            "seconds": round(now - since, 3),
            **{k: counts.get(k, 0) for k in ("succeeded", "failed", "retried", "timeout")},
            "lease_lost": losses + counts.get("lease_lost", 0),  # at renewal, commit, start
            "unknown_task": counts.get("unknown_task", 0),
            "claims": lags.seen,
            "lag_p50_ms": _ms(percentile(lag, 0.5)),
            "lag_p99_ms": _ms(percentile(lag, 0.99)),
            "wait_p50_ms": _ms(percentile(wait, 0.5)),
            "wait_p99_ms": _ms(percentile(wait, 0.99)),
        }

    def log_summary(self) -> dict[str, Any]:
        """Log the period's one-line summary at INFO; returns its figures."""
        s = self.take()
        if log.isEnabledFor(logging.INFO):
            log.info(
                summary_line(s), extra={"event": "summary", "replica": self._owner, "summary": s}
            )
        return s


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def summary_line(s: dict[str, Any]) -> str:
    """``summary of the last 60s: 1,204 succeeded, 3 failed, 2 retried; lag p50 1.2 ms,
    p99 8.4 ms over 1,209 claims; queue wait p50 0.1 ms, p99 2 ms`` (plus timeouts, lost
    leases and unknown tasks when there were any)."""
    parts = [f"{s['succeeded']:,} succeeded", f"{s['failed']:,} failed"]
    parts.append(f"{s['retried']:,} retried")
    for key, what in (("timeout", "timed out"), ("lease_lost", "lease(s) lost")):
        if s[key]:
            parts.append(f"{s[key]:,} {what}")
    if s["unknown_task"]:
        parts.append(f"{s['unknown_task']:,} of unknown tasks")
    line = f"summary of the last {s['seconds']:.0f}s: " + ", ".join(parts)
    if s["claims"]:
        line += (
            f"; lag p50 {_shown(s['lag_p50_ms'])}, p99 {_shown(s['lag_p99_ms'])} over "
            f"{s['claims']:,} claims"
        )
    else:
        line += "; no claims"
    if s["wait_p50_ms"] is not None:
        line += f"; queue wait p50 {_shown(s['wait_p50_ms'])}, p99 {_shown(s['wait_p99_ms'])}"
    return line


def _shown(ms: float) -> str:
    """``8.4 ms``; past a second in seconds (a lag of 1,056,940 ms was ``1.05694e+06 ms``)."""
    return f"{ms:g} ms" if ms < 1000 else f"{ms / 1000:,.1f} s"
