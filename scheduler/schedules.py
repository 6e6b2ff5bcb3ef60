"""Pure schedule arithmetic: fixed-rate grid points and the misfire plan.

No clocks, no state: the stores call these with their own "now", and hypothesis tests
compare them with a brute-force model (tests/unit/test_schedules.py).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

from scheduler import cron as crons
from scheduler.model import GRACE_CAP, Cron, Misfire

DENOMINATOR_MAX = 10**6  # per millisecond: the finest fraction an interval is read as


@functools.lru_cache(maxsize=4096)
@functools.lru_cache(maxsize=4096)  # a job's interval is read on each of its occurrences
def exact_interval(seconds: float) -> Fraction:
    """The interval a float of seconds stands for, exactly: the fraction of a millisecond
    with denominator <= 10^6 that the float is the nearest double of (``1/3`` is 1000/3 ms,
    ``0.1`` is 100 ms), else the float's value rounded up to the nanosecond. Both stores
    compute their grid from it, so they agree on it, and no occurrence is early."""
    ms = Fraction(seconds) * 1000
    if ms.denominator == 1:
        return ms / 1000
    near = ms.limit_denominator(DENOMINATOR_MAX)
    if float(near / 1000) == seconds:
        return near / 1000
    return Fraction(math.ceil(ms * 10**6), 10**9)


def occurrence(anchor: float, interval: float | Fraction, k: int) -> float:
    """Due time of occurrence k: anchor + k * interval, computed from k (never by adding
    intervals up), so there is no drift however many runs there have been, and rounded
    up, never down. Integer anchors with an integer or Fraction interval (the shared
    store's milliseconds) give ``anchor + ceil(k * interval)``; float seconds (the
    in-process store) give the least float >= anchor + k * exact_interval(interval)."""
    if isinstance(anchor, int) and isinstance(interval, int | Fraction):
        return anchor + math.ceil(k * interval)
    exact = Fraction(anchor) + k * exact_interval(float(interval))
    t = float(exact)
    while Fraction(t) < exact:
        t = math.nextafter(t, math.inf)
    return t


def last_index_at_or_before(anchor: float, interval: float | Fraction, now: float) -> int:
    """The largest k with occurrence(k) <= now (-1 if the anchor is still ahead)."""
    if now < anchor:
        return -1
    k = math.floor((now - anchor) / _step(interval))
    # float division may land one off either way; settle it with the exact comparison
    while occurrence(anchor, interval, k) > now:
        k -= 1
    while occurrence(anchor, interval, k + 1) <= now:
        k += 1
    return k


def first_index_at_or_after(anchor: float, interval: float | Fraction, t: float) -> int:
    """The smallest k >= 0 with occurrence(k) >= t."""
    k = max(0, math.ceil((t - anchor) / _step(interval)))
    while k > 0 and occurrence(anchor, interval, k - 1) >= t:
        k -= 1
    while occurrence(anchor, interval, k) < t:
        k += 1
    return k


def _step(interval: float | Fraction) -> float:
    """The interval the grid steps by, as a float: a float interval's exact value (which
    may be rounded up to the nanosecond: dividing by the raw float left k off by a step
    per ~10^3 intervals of 1 microsecond, each walked back one at a time)."""
    return float(exact_interval(interval)) if isinstance(interval, float) else float(interval)


def grace_for(interval: float, grace: float | None) -> float:
    """Default misfire grace: one interval, at most 60 s."""
    return min(interval, GRACE_CAP) if grace is None else grace


@dataclass(frozen=True)
class Plan:
    """What to do now with a due recurring occurrence k.

    ``run``: the index to run now (or None); ``skipped``: an inclusive index range recorded
    as skipped with ``reason``; ``next_k``: the next occurrence to keep pending."""

    run: int | None
    next_k: int
    skipped: tuple[int, int] | None = None
    reason: str = ""


def plan(
    anchor: float,
    interval: float | Fraction,
    k: int,
    now: float,
    policy: Misfire,
    grace: float,
    window: float | None = None,
) -> Plan:
    """Decide about occurrence k, which is due (occurrence(k) <= now).

    An occurrence is *missed* when now - due > grace. ``catch_up`` runs k and keeps k+1
    pending (which is due at once if it was missed too: one run per claim, bounded work);
    with a ``window``, occurrences older than now - window are skipped instead (reason
    ``catch-up-window``). ``skip`` records the missed ones and runs the first on-time one,
    if any; otherwise the next run is the first grid point after now. ``run_once`` runs
    the latest due occurrence in place of all the missed ones."""
    reason = "misfire"
    if policy is Misfire.CATCH_UP:
        if window is None:
            return Plan(run=k, next_k=k + 1)
        grace, reason = window, "catch-up-window"
    on_time = first_index_at_or_after(anchor, interval, now - grace)
    if k >= on_time:
        return Plan(run=k, next_k=k + 1)
    m = last_index_at_or_before(anchor, interval, now)
    if policy is Misfire.RUN_ONCE:
        skipped = (k, m - 1) if m > k else None
        return Plan(run=m, next_k=m + 1, skipped=skipped, reason="coalesced")
    if on_time <= m:
        return Plan(run=on_time, next_k=on_time + 1, skipped=(k, on_time - 1), reason=reason)
    return Plan(run=None, next_k=m + 1, skipped=(k, m), reason=reason)


# ---- backfill windows --------------------------------------------------------------

BACKFILL_LIMIT = 10_000  # occurrences one backfill call may consider


def window(
    job_id: str,
    cron: Cron | None,
    grid: tuple[float, float | Fraction] | None,
    start: float,
    end: float,
) -> list[float]:
    """The occurrences in [start, end), ascending: of ``cron`` (wall epoch seconds), or
    of the fixed-rate ``grid`` (anchor, interval; k >= 0) in the same clock as start/end.
    Raises ValueError for neither (a one-off job) or more than BACKFILL_LIMIT."""
    if cron is not None:
        out = list(
            itertools.islice(crons.occurrences(cron, start, end, job_id), BACKFILL_LIMIT + 1)
        )
    elif grid is not None:
        anchor, iv = grid
        k = first_index_at_or_after(anchor, iv, start)
        n = min(max(0, first_index_at_or_after(anchor, iv, end) - k), BACKFILL_LIMIT + 1)
        out = [occurrence(anchor, iv, k + i) for i in range(n)]
    else:
        raise ValueError(f"job {job_id!r} is not recurring: nothing to backfill")
    if len(out) > BACKFILL_LIMIT:
        raise ValueError(
            f"the window holds more than {BACKFILL_LIMIT} occurrences of "
            f"{job_id!r}; backfill a narrower window at a time"
        )
    return out
