"""MemoryStore's recurring series: the first pending occurrence of a job, and the step
taken when an occurrence is due (misfire plan, next occurrence, skipped range).

Fixed-rate series live on the store's clock (an anchor plus k intervals), computed in
whole grid units as the shared store computes them (``grid_step``: the millisecond, the
microsecond for an interval under 1 ms): exact integer (or rational) arithmetic, each
occurrence then read as the double nearest it, the double a clock at that instant reads
(float arithmetic put an occurrence a rounding error after it). Calendar series live on
the wall clock (each ``Pending`` carries its epoch instant in ``wall``) and are
converted to the store's clock when pushed.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

from scheduler import cron as crons
from scheduler import schedules
from scheduler.model import After, At, Cron, Every, Skip
from scheduler.stores.memory.records import JobRecord, Pending


@dataclass(frozen=True)
class Step:
    """``run``: the scheduled time (store clock) to run now, or None; ``next``: the
    occurrence to keep pending (None: the series has ended); ``skip``: what to record."""

    run: float | None
    next: Pending | None
    skip: Skip | None = None


def first(job: JobRecord, now: float, wall: float) -> Pending | None:
    """The first pending invocation of a freshly added job (None: a calendar schedule
    that never fires again)."""
    sched = job.spec.schedule
    if isinstance(sched, After):
        return Pending(now + sched.delay, 1, now + sched.delay)
    if isinstance(sched, At):
        due = now + (sched.wall - wall)
        return Pending(due, 1, due)
    if isinstance(sched, Cron):
        return _calendar(crons.next_after(sched, wall, job.spec.job_id), now, wall)
    unit, iv = grid_step(sched.interval)
    now_u = units_at(now, unit)
    # the moment of scheduling (its unit, as the shared store's now), or the explicit
    # anchor's unit, rounded up (never early)
    anchor = now_u if sched.anchor is None else _units_up(now + (sched.anchor - wall), unit)
    job.anchor = anchor
    # every grid point strictly after the moment of scheduling, never before the anchor
    k = max(0, schedules.last_index_at_or_before(anchor, iv, now_u) + 1)
    due = schedules.occurrence(anchor, iv, k) / unit
    return Pending(due, 1, due, k)


@functools.lru_cache(maxsize=4096)  # a job's interval is read on each of its occurrences
def grid_step(seconds: float) -> tuple[int, int | Fraction]:
    """(grid units per second, the interval in units, exact): the millisecond of the
    shared store (``rates.encode``: whole ms, or a fraction of one), the microsecond for an
    interval under 1 ms (in process only: the shared store refuses one)."""
    unit = 1000 if seconds >= 0.001 else 1_000_000
    iv = schedules.exact_interval(seconds) * unit
    return unit, (iv.numerator if iv.denominator == 1 else iv)


def units_at(t: float, unit: int) -> int:
    """The grid unit store time ``t`` is in (a reading within a nanosecond of a unit's
    start, float noise, is in it): ``now`` on the grid."""
    return math.floor(round(t * unit, 6))


def _units_up(t: float, unit: int) -> int:
    """``t`` in whole units, rounded up (within a nanosecond: float noise, not up)."""
    return math.ceil(round(t * unit, 6))


def step(job: JobRecord, p: Pending, now: float, wall: float) -> Step:
    """Apply the job's misfire policy to its due series occurrence ``p``."""
    spec = job.spec
    sched = spec.schedule
    if isinstance(sched, Cron):
        assert p.wall is not None
        to_wall = wall - now  # store time + to_wall = wall time
        cp = crons.plan_calendar(
            sched, spec.job_id, p.wall, wall, spec.misfire, spec.misfire_grace, spec.catch_up_window
        )
        skip = None
        if cp.skipped is not None:
            first_w, last_w, count = cp.skipped
            skip = Skip(first_w - to_wall, last_w - to_wall, count, cp.reason)
        run = None if cp.run is None else (p.scheduled if cp.run == p.wall else cp.run - to_wall)
        return Step(run, _calendar(cp.pending, now, wall), skip)
    anchor = job.anchor
    assert isinstance(sched, Every) and anchor is not None and p.k is not None
    unit, iv = grid_step(sched.interval)
    window = spec.catch_up_window
    plan = schedules.plan(
        anchor,
        iv,
        p.k,
        units_at(now, unit),
        spec.misfire,
        round(schedules.grace_for(sched.interval, spec.misfire_grace) * unit),
        None if window is None else round(window * unit),
    )
    skip = None
    if plan.skipped is not None:
        a, b = plan.skipped
        skip = Skip(
            schedules.occurrence(anchor, iv, a) / unit,
            schedules.occurrence(anchor, iv, b) / unit,
            b - a + 1,
            plan.reason,
        )
    nxt = schedules.occurrence(anchor, iv, plan.next_k) / unit
    run = None if plan.run is None else schedules.occurrence(anchor, iv, plan.run) / unit
    return Step(run, Pending(nxt, 1, nxt, plan.next_k), skip)


def _calendar(instant: float | None, now: float, wall: float) -> Pending | None:
    if instant is None:
        return None
    due = now + (instant - wall)
    return Pending(due, 1, due, k=0, wall=instant)


def occurrences_between(
    job: JobRecord, start: float, end: float, now: float, wall: float
) -> list[float]:
    """The series' occurrences with wall time in [start, end), in store time, ascending
    (``schedules.window``: ValueError for a one-off job or an oversized window)."""
    sched, to_store = job.spec.schedule, now - wall
    if isinstance(sched, Cron):
        return [x + to_store for x in schedules.window(job.spec.job_id, sched, None, start, end)]
    if not (isinstance(sched, Every) and job.anchor is not None):
        return schedules.window(job.spec.job_id, None, None, start, end)  # raises
    unit, iv = grid_step(sched.interval)
    lo, hi = (start + to_store) * unit, (end + to_store) * unit
    return [x / unit for x in schedules.window(job.spec.job_id, None, (job.anchor, iv), lo, hi)]
