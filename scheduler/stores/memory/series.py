"""MemoryStore's recurring series: the first pending occurrence of a job, and the step
taken when an occurrence is due (misfire plan, next occurrence, skipped range).

Fixed-rate series live on the store's clock (an anchor plus k intervals); calendar
series live on the wall clock (each ``Pending`` carries its epoch instant in ``wall``)
and are converted to the store's clock when pushed.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    anchor = now if sched.anchor is None else now + (sched.anchor - wall)
    job.anchor = anchor
    # every grid point strictly after the moment of scheduling, never before the anchor
    k = max(0, schedules.last_index_at_or_before(anchor, sched.interval, now) + 1)
    due = schedules.occurrence(anchor, sched.interval, k)
    return Pending(due, 1, due, k)


def step(job: JobRecord, p: Pending, now: float, wall: float) -> Step:
    """Apply the job's misfire policy to its due series occurrence ``p``."""
    spec = job.spec
    sched = spec.schedule
    if isinstance(sched, Cron):
        assert p.wall is not None
        to_wall = wall - now  # store time + to_wall = wall time
        grace = schedules.calendar_grace(sched, spec.job_id, p.wall, spec.misfire_grace)
        cp = schedules.plan_calendar(
            sched, spec.job_id, p.wall, wall, spec.misfire, grace, spec.catch_up_window
        )
        skip = None
        if cp.skipped is not None:
            first_w, last_w, count = cp.skipped
            skip = Skip(first_w - to_wall, last_w - to_wall, count, cp.reason)
        run = None if cp.run is None else (p.scheduled if cp.run == p.wall else cp.run - to_wall)
        return Step(run, _calendar(cp.pending, now, wall), skip)
    assert isinstance(sched, Every) and job.anchor is not None and p.k is not None
    iv = sched.interval
    plan = schedules.plan(
        job.anchor,
        iv,
        p.k,
        now,
        spec.misfire,
        schedules.grace_for(iv, spec.misfire_grace),
        spec.catch_up_window,
    )
    skip = None
    if plan.skipped is not None:
        a, b = plan.skipped
        skip = Skip(
            schedules.occurrence(job.anchor, iv, a),
            schedules.occurrence(job.anchor, iv, b),
            b - a + 1,
            plan.reason,
        )
    nxt = schedules.occurrence(job.anchor, iv, plan.next_k)
    run = None if plan.run is None else schedules.occurrence(job.anchor, iv, plan.run)
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
    grid = (
        (job.anchor, sched.interval)
        if (isinstance(sched, Every) and job.anchor is not None)
        else None
    )
    return schedules.window(job.spec.job_id, None, grid, start + to_store, end + to_store)
