"""Calendar arithmetic for ``Cron`` schedules: pure functions of (schedule, instant), no I/O.

Guarantees:
  - the expression is parsed and iterated by croniter over NAIVE local wall times (a wall
    clock without daylight saving); each wall time is then mapped to instants with zoneinfo:
    a unique time gives one instant; a time that occurs twice (clocks go back) gives the
    earlier instant (``first``), the later one (``last``) or both (``both``); a time that
    does not exist (clocks go forward) gives nothing (``skip``) or the instant the clocks
    changed (``shift``). Equal instants are one occurrence.
  - the occurrences of a schedule form one strictly increasing sequence of epoch seconds;
    ``next_after`` and ``occurrences`` walk that sequence and agree with each other.
  - jitter moves occurrence ``b`` to ``b + floor(u * min(jitter, next - b) ms)`` where ``u``
    in [0, 1) is fixed per job id (a BLAKE2b hash, the same in every process) and ``next``
    is the following base occurrence: a jittered run is strictly before the next base
    occurrence, so jitter keeps the order and never merges or skips runs. Every returned
    instant lies on an exact millisecond, so replicas derive identical invocation ids.
  - pure and thread-safe: parsed expressions are cached; each call iterates a private copy.

  - the misfire plan of a due occurrence (``plan_calendar``) applies the fixed-rate rules
    (``schedules.plan``) over this irregular sequence, in one call: a shared store's
    replica and the in-process store plan a series alike.

What an expression may say, and how it is normalised: ``cron_rules.validate``.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from scheduler.model import GRACE_CAP, Ambiguous, Cron, Misfire, Missing

__all__ = ["next_after", "occurrences", "calendar_grace", "plan_calendar", "CalendarPlan"]

_ONE_S = dt.timedelta(seconds=1)


PARSE_FROM = dt.datetime(2000, 1, 1)
# Offset changes are looked for this far around an instant (sampled every 15 min): all
# real UTC offsets lie in [-12 h, +14 h], so a change further away cannot bring the wall
# clock back to a reading near the instant's.
_SPAN = 27 * 3600
_STEP = 900
_RANGE = (
    dt.datetime(1900, 1, 1, tzinfo=dt.timezone.utc).timestamp(),
    dt.datetime(9000, 1, 1, tzinfo=dt.timezone.utc).timestamp(),
)


class Naive:
    """A typed wrapper over one croniter iterating naive wall times from ``start``."""

    def __init__(self, proto: Any, start: dt.datetime) -> None:
        self._it = copy.copy(proto)  # croniter keeps its position in the instance
        self._it.set_current(start, force=True)

    def next(self) -> dt.datetime | None:
        """The next matching wall time strictly after the last one; None past the end."""
        return self._step(False)

    def prev(self) -> dt.datetime | None:
        """The previous matching wall time strictly before the last one; None if none."""
        return self._step(True)

    def move(self, to: dt.datetime) -> None:
        """Continue from ``to``: the next step returns a wall time after (before) it."""
        self._it.set_current(to, force=True)

    def _step(self, backwards: bool) -> dt.datetime | None:
        try:
            got = self._it.get_prev() if backwards else self._it.get_next()
        except (CroniterBadDateError, OverflowError, ValueError):
            return None
        assert isinstance(got, dt.datetime)
        return got.replace(tzinfo=None)


@functools.lru_cache(maxsize=1024)
def prototype(expr: str) -> Any:
    """A parsed croniter for ``expr`` (parsing costs ~150 us; copies cost ~8 us)."""
    return croniter(expr, PARSE_FROM, ret_type=dt.datetime, second_at_beginning=True)


@functools.lru_cache(maxsize=256)
def zone(tz: str) -> ZoneInfo:
    return ZoneInfo(tz)


def _offset(z: ZoneInfo, t: int) -> int:
    off = dt.datetime.fromtimestamp(t, z).utcoffset()
    assert off is not None
    return int(off.total_seconds())


@functools.lru_cache(maxsize=4096)
def _changes(z: ZoneInfo, day: int) -> tuple[tuple[int, int, int], ...]:
    """The offset changes of ``z`` within ``_SPAN`` seconds of the UTC day ``day``, as
    (instant, offset before, offset after): sampled every ``_STEP`` s, then bisected to the
    exact second."""
    found = []
    first = day * 86400 - _SPAN
    before = _offset(z, first)
    for hi in range(first + _STEP, (day + 1) * 86400 + _SPAN + _STEP, _STEP):
        after = _offset(z, hi)
        if after != before:
            a, b = hi - _STEP, hi
            while b - a > 1:
                mid = (a + b) // 2
                a, b = (a, mid) if _offset(z, mid) == after else (mid, b)
            found.append((b, before, after))
        before = after
    return tuple(found)


class _Reach(NamedTuple):
    below: int  # how far below its reading at t the wall clock goes after t (a fold ahead)
    above: int  # how far above it the wall clock went before t (a fold behind)
    ahead: int | None  # the first offset change after t
    behind: int | None  # the last offset change at or before t


def _reach(z: ZoneInfo, t: int) -> _Reach:
    """How far from its reading at ``t`` the wall clock strays around ``t`` (offsets lie
    within 26 h of each other, so changes more than ``_SPAN`` away cannot matter)."""
    here = t + _offset(z, t)
    below = above = 0
    ahead = behind = None
    for at, before, after in _changes(z, t // 86400):
        if t < at <= t + _SPAN:
            below = max(below, here - (at + after))
            ahead = at if ahead is None else ahead
        elif t - _SPAN < at <= t:
            above = max(above, at + before - here)
            behind = at
    return _Reach(below, above, ahead, behind)


def _local(z: ZoneInfo, t: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, z).replace(tzinfo=None)


@functools.lru_cache(maxsize=1024)
def _transition(z: ZoneInfo, lo: int, hi: int, wall: dt.datetime) -> int:
    """The first instant in (lo, hi] whose wall time is past ``wall`` (a skipped time):
    the instant the clocks jumped forward over it. Bisection on whole seconds."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _local(z, mid) > wall:
            hi = mid
        else:
            lo = mid
    return hi


def _instants(
    z: ZoneInfo, wall: dt.datetime, amb: Ambiguous, miss: Missing
) -> tuple[list[int], int, int, int | None]:
    """The instants of one wall time under the policies; bounds (lo, hi) such that every
    instant this wall time could denote lies in [lo, hi] (``lo`` and ``hi`` never decrease
    as ``wall`` grows, which is what lets the scans below stop early); and, for a wall time
    the clocks skipped, the instant they jumped (every skipped time maps to it)."""
    i0 = int(wall.replace(tzinfo=z).timestamp())
    i1 = int(wall.replace(tzinfo=z, fold=1).timestamp())
    if i0 == i1:
        return [i0], i0, i0, None
    lo, hi = min(i0, i1), max(i0, i1)
    if _local(z, i0) == wall:  # round-trips: the time occurs twice (i0 < i1)
        if amb is Ambiguous.FIRST:
            return [i0], lo, hi, None
        if amb is Ambiguous.LAST:
            return [i1], lo, hi, None
        return [i0, i1], lo, hi, None
    jump = _transition(z, i1, i0, wall)  # in a gap: i1 is before the jump, i0 after it
    return ([] if miss is Missing.SKIP else [jump]), lo, hi, jump


def _bases_after(c: Cron, t: int) -> Iterator[int]:
    """Every base (unjittered) occurrence strictly after ``t``, ascending, no duplicates."""
    z = zone(c.tz)
    reach = _reach(z, t)
    last = t
    if reach.below and reach.ahead is not None:
        # Wall times below t's reading only denote instants after t by coming round again
        # after a change ahead; until that change, the scan from t's reading is complete
        # (and it skips walking a whole repeated hour of a dense schedule).
        for x in _scan_up(c, z, _local(z, t), t, t):
            if x >= reach.ahead:
                break
            last = x
            yield x
    yield from _scan_up(c, z, _local(z, t) - dt.timedelta(seconds=reach.below), t, last)


def _scan_up(c: Cron, z: ZoneInfo, start: dt.datetime, t: int, after: int) -> Iterator[int]:
    """The instants after ``after`` (>= ``t``) of the wall times from ``start`` on,
    ascending, no duplicates; complete once ``start`` is low enough (``_reach``).

    An instant is emitted once no later wall time can denote an earlier one after ``t``:
    a wall time's earliest instant never decreases as the wall time grows, nor does, above
    t's reading, its first instant after ``t`` (the clock reaches higher readings later),
    a much tighter bound inside a repeated hour."""
    amb, miss = Ambiguous(c.ambiguous), Missing(c.missing)
    here = _local(z, t)
    it = Naive(prototype(c.expr), start - _ONE_S)
    pending: list[int] = []
    last = after
    while True:
        wall = it.next()
        lb = math.inf
        if wall is not None:
            got, lb, hi, jump = _instants(z, wall, amb, miss)
            pending.extend(x for x in got if x > last)
            pending.sort()
            if wall > here:
                lb = min((p for p in ((lb, hi) if jump is None else (jump,)) if p > t), default=lb)
            if jump is not None:  # the rest of the gap maps to the same instant
                it.move(_local(z, jump) - _ONE_S)
        while pending and pending[0] <= lb:
            x = pending.pop(0)
            if x > last:
                last = x
                yield x
        if wall is None:
            return


def _last_base_at_or_before(c: Cron, t: int, floor: float) -> int | None:
    """The last base occurrence ``b`` with ``floor < b <= t``; None if there is none."""
    z = zone(c.tz)
    reach = _reach(z, t)
    top = _local(z, t) + dt.timedelta(seconds=reach.above)
    if reach.above and reach.behind is not None:
        # Instants since the last change show wall times up to t's reading: search them
        # first (and skip walking a whole repeated hour of a dense schedule).
        best = _scan_down(c, z, _local(z, t), t, max(floor, reach.behind - 1))
        if best is not None or floor >= reach.behind - 1:
            return best
        t = reach.behind - 1
    return _scan_down(c, z, top, t, floor)


def _scan_down(c: Cron, z: ZoneInfo, start: dt.datetime, t: int, floor: float) -> int | None:
    """The last instant in (floor, t] of the wall times from ``start`` down; complete once
    ``start`` is high enough (``_reach``). The mirror of ``_scan_up``: below t's reading a
    wall time's last instant up to ``t`` never increases as the wall time falls."""
    amb, miss = Ambiguous(c.ambiguous), Missing(c.missing)
    here = _local(z, t)
    it = Naive(prototype(c.expr), start + _ONE_S)
    best: int | None = None
    while True:
        wall = it.prev()
        if wall is None:
            return best
        got, lo, ub, jump = _instants(z, wall, amb, miss)
        for x in got:
            if floor < x <= t and (best is None or x > best):
                best = x
        if wall < here:
            ub = max((p for p in ((lo, ub) if jump is None else (jump,)) if p <= t), default=ub)
        if jump is not None:  # the rest of the gap maps to the same instant
            it.move(_local(z, jump - 1) + _ONE_S)
        if ub <= floor or (best is not None and ub <= best):
            return best


@functools.lru_cache(maxsize=4096)
def _fraction(job_id: str) -> float:
    """A fraction in [0, 1) fixed by the job id, identical in every process."""
    digest = hashlib.blake2b(job_id.encode(), digest_size=8, person=b"duetime-jitter").digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _jittered(c: Cron, base: int, following: int | None, job_id: str) -> float:
    """``base`` delayed by the job's share of ``min(jitter, following - base)``, in whole
    milliseconds, strictly before ``following``."""
    if c.jitter <= 0:
        return float(base)
    cap = (
        c.jitter * 1000.0
        if following is None
        else min(c.jitter * 1000.0, (following - base) * 1000.0)
    )
    return (base * 1000 + math.floor(_fraction(job_id) * cap)) / 1000.0


def _check_range(*ts: float) -> None:
    for t in ts:
        if not (math.isfinite(t) and _RANGE[0] <= t < _RANGE[1]):
            raise ValueError(f"cron times are finite epoch seconds from 1900 to 8999, got {t!r}")


def next_after(c: Cron, t: float, job_id: str) -> float | None:
    """The first occurrence strictly after epoch seconds ``t`` (jitter applied), on an exact
    millisecond; None if the schedule has no later occurrence (croniter stops searching
    after 50 years without a match). ``c`` should come from ``cron_rules.validate``; ``t`` must be
    finite, in years 1900-8999 (ValueError otherwise).
    """
    _check_range(t)
    ti = math.floor(t)
    after = _bases_after(c, ti)
    b1 = next(after, None)
    if c.jitter > 0:
        b0 = _last_base_at_or_before(c, ti, ti - c.jitter)
        if b0 is not None:
            j0 = _jittered(c, b0, b1, job_id)
            if j0 > t:
                return j0
    if b1 is None:
        return None
    return _jittered(c, b1, next(after, None), job_id)


def occurrences(c: Cron, start: float, end: float, job_id: str) -> Iterator[float]:
    """Every occurrence (jitter applied, exact milliseconds) in ``[start, end)``, ascending,
    without duplicates: the same instants ``next_after`` steps through. ``start`` must be
    finite, in years 1900-8999; ``end`` may be anything larger (ValueError otherwise)."""
    _check_range(start)
    if math.isnan(end):
        raise ValueError("occurrences needs an end that is a number, got nan")
    if end <= start:
        return
    first = math.ceil(start) - 1  # bases are whole seconds: base > first <=> base >= start
    if c.jitter > 0:  # the last base before start may be jittered into the window
        b0 = _last_base_at_or_before(c, first, start - c.jitter)
        if b0 is not None:
            first = b0 - 1
    bases = _bases_after(c, first)
    b = next(bases, None)
    while b is not None:
        following = next(bases, None)
        x = _jittered(c, b, following, job_id)
        if x >= end:
            return
        if x >= start:
            yield x
        b = following


# ---- the misfire plan of a due occurrence (the fixed-rate rules, schedules.py) --------

SKIP_COUNT_CAP = 10_000  # a skipped range longer than this is counted only up to here


@dataclass(frozen=True)
class CalendarPlan:
    """What to do now with a due calendar occurrence (epoch seconds throughout).

    ``run``: the occurrence to run now (or None); ``pending``: the next occurrence to keep
    pending (None: the expression never fires again); ``skipped``: (first, last, count)
    recorded as skipped with ``reason``; ``later``: when nothing runs now, the occurrence
    after ``pending`` (a shared store writes both; None otherwise)."""

    run: float | None
    pending: float | None
    skipped: tuple[float, float, int] | None = None
    reason: str = ""
    later: float | None = None


def calendar_grace(cron: Cron, job_id: str, t: float, grace: float | None) -> float:
    """Default misfire grace of a calendar occurrence: the gap to the next one, at most
    60 s (the grid rule, with the local gap standing in for the interval)."""
    if grace is not None:
        return grace
    nxt = next_after(cron, t, job_id)
    return GRACE_CAP if nxt is None else min(nxt - t, GRACE_CAP)


def plan_calendar(
    cron: Cron,
    job_id: str,
    t: float,
    now: float,
    policy: Misfire,
    grace: float | None,
    window: float | None = None,
) -> CalendarPlan:
    """Decide about calendar occurrence ``t`` (due: t <= now) by the rules of
    ``schedules.plan`` (the fixed-rate ones, over this irregular sequence); ``grace``:
    the job's misfire grace (None: ``calendar_grace``'s default)."""

    def after(x: float) -> float | None:
        return next_after(cron, x, job_id)

    grace = calendar_grace(cron, job_id, t, grace)
    reason = "misfire"
    if policy is Misfire.CATCH_UP:
        if window is None:
            return CalendarPlan(run=t, pending=after(t))
        grace, reason = window, "catch-up-window"
    if t >= now - grace:
        return CalendarPlan(run=t, pending=after(t))
    if policy is Misfire.RUN_ONCE:
        latest = _latest_at_or_before(cron, job_id, t, now)
        skipped = _skipped(cron, job_id, t, latest) if latest > t else None
        return CalendarPlan(run=latest, pending=after(latest), skipped=skipped, reason="coalesced")
    on_time = after(now - grace - 0.001)  # the first occurrence >= now - grace
    if on_time is not None and on_time <= now:
        return CalendarPlan(
            run=on_time,
            pending=after(on_time),
            skipped=_skipped(cron, job_id, t, on_time),
            reason=reason,
        )
    skipped = _skipped(cron, job_id, t, now + 0.0005)
    later = None if on_time is None else after(on_time)
    return CalendarPlan(run=None, pending=on_time, skipped=skipped, reason=reason, later=later)


def _latest_at_or_before(cron: Cron, job_id: str, t: float, now: float) -> float:
    """The latest occurrence in [t, now] (t itself is one), searching back from now in
    growing windows so a long gap costs no more than a short one."""
    width = 1.0
    while True:
        lo = max(t, now - width)
        found = list(occurrences(cron, lo, now + 0.0005, job_id))
        if found:
            return found[-1]
        if lo == t:
            return t
        width *= 4


def _skipped(cron: Cron, job_id: str, first: float, end: float) -> tuple[float, float, int]:
    """(first, last, count) of the occurrences in [first, end), counted up to the cap."""
    last, count = first, 0
    for x in occurrences(cron, first, end, job_id):
        last, count = x, count + 1
        if count >= SKIP_COUNT_CAP:
            break
    return first, last, max(count, 1)
