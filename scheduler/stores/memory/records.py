"""MemoryStore's records: what it keeps per job, per pending and per running invocation,
and how a job record reads as a ``JobInfo`` snapshot."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.model import (
    Event,
    InvocationInfo,
    JobInfo,
    JobSpec,
    Misfire,
    Overlap,
    Progress,
    Skip,
    describe_target,
)

RECENT = 20  # skipped ranges and dead letters kept per job


@dataclass(slots=True)
class Pending:
    scheduled: float
    attempt: int
    due: float  # scheduled, or a retry time
    k: int | None = None  # series index of a recurring occurrence (None: retry / one-off)
    stalls: int = 0  # how many owners lost their lease on this invocation
    wall: float | None = None  # a calendar occurrence's epoch instant
    ready: float = 0.0  # claimable from (store clock): max(due, when it was pushed)
    redo: bool = False  # queued by an operator's retry: a retry, not a first run pending
    place: int | None = None  # set aside by a pause: its place in line (seq) at resume


@dataclass(slots=True)
class Running:
    job_id: str
    generation: int
    scheduled: float
    attempt: int
    fence: int
    lease_until: float | None
    spec: JobSpec
    stalls: int = 0
    ready: float = 0.0  # its claim's ready: a release keeps it (dispatch lag counts from it)


@dataclass(slots=True)
class JobRecord:
    spec: JobSpec
    generation: int
    anchor: int | None  # a fixed-rate series' anchor, in grid units (series.grid_step)
    pending: dict[int, Pending] = field(default_factory=dict)  # seq -> pending
    paused: list[Pending] | None = None
    queued: Pending | None = None  # overlap=queue: one occurrence held while another runs
    cancelled: bool = False
    outcome: str = ""  # final state of a finished one-off job
    runs: int = 0
    failures: int = 0
    attempts: int = 0
    last_result: Any = None
    last_error: str | None = None
    last_traceback: str = ""
    last_token: str = ""  # token of the last commit: a resend answers OK again
    since: float | None = None  # the series' first occurrence (lowered by backfill)
    resumed: float = 0.0  # its last resume: occurrences due before it are ready from it
    backfilled: set[float] | None = None  # occurrences a backfill has queued
    skipped: deque[Skip] | None = None  # created on first use: most jobs never skip
    unreported: Skip | None = None  # skips since its last claim, summed (Claim.skipped)
    dead_letters: deque[Event] | None = None
    queue: str = ""  # the queue it waits in (scheduler/flow.py queue_of; set at add)
    ended: str = ""  # how a run ended while another ran: the outcome if a hand-back ends last
    progress: Progress | None = None  # what a run last reported (stores/memory/outcomes.py)
    kept_until: float = float("inf")  # finished: kept until then (store clock; outcomes.py)

    def due_in(self, now: float) -> float | None:
        """Seconds until the job's earliest pending invocation (None: nothing pending)."""
        dues = [p.due for p in self.pending.values()]
        return max(0.0, min(dues) - now) if dues else None

    def never_ran(self, t: float) -> bool:
        """Did occurrence ``t`` (before the pending one) never run? True if it precedes
        the series, or lies in a recorded skipped range, and no backfill queued it."""
        if self.backfilled is not None and t in self.backfilled:
            return False
        if self.since is not None and t < self.since:
            return True
        return any(s.first <= t <= s.last for s in self.skipped or ())

    def note_skip(self, skip: Skip) -> None:
        if self.skipped is None:
            self.skipped = deque(maxlen=RECENT)
        self.skipped.append(skip)
        self.unreported = skip if self.unreported is None else self.unreported.then(skip)

    def told(self) -> Skip | None:
        """The skips its next claim tells of (since its last claim), taken."""
        skipped, self.unreported = self.unreported, None
        return skipped

    def note_dead_letter(self, event: Event) -> None:
        if self.dead_letters is None:
            self.dead_letters = deque(maxlen=RECENT)
        self.dead_letters.append(event)


def defers(job: JobRecord, p: Pending) -> bool:
    """Would claiming ``p`` be judged against a run of its job claimed in the same call
    (overlap, catch-up)? Such an occurrence waits for the next call (its job's end wakes
    the dispatchers): a batch claimed ahead of the workers decides as one claimed by a
    free worker would, after the earlier run ended."""
    spec = job.spec
    return (
        p.k is not None
        and spec.recurring
        and (spec.overlap is not Overlap.ALLOW or spec.misfire is Misfire.CATCH_UP)
    )


def rerun_due(job: JobRecord, now: float) -> bool:
    """Is a re-run of ``job`` (a retry; a reaped, released, triggered, backfilled or
    operator-retried run: a pending run that is not an occurrence) due at ``now``? It goes
    first: the job's due occurrence waits for a later claim (docs/guarantees.md, Overlap)."""
    return any(p.k is None and p.due <= now for p in job.pending.values())


def lane_depths(jobs: Iterable[JobRecord], now: float) -> dict[str, tuple[int, int]]:
    """Per lane: pending invocations of ``jobs``, and how many are due at ``now``."""
    out: dict[str, tuple[int, int]] = {}
    for job in jobs:
        if job.pending:
            queued, due = out.get(job.spec.lane, (0, 0))
            ready = sum(1 for p in job.pending.values() if p.due <= now)
            out[job.spec.lane] = (queued + len(job.pending), due + ready)
    return out


def job_info(job: JobRecord, running: Sequence[Running]) -> JobInfo:
    """A snapshot of ``job``; ``running`` are its running invocations."""
    if job.cancelled:
        state = "cancelled"
    elif job.paused is not None:
        state = "paused"
    elif running:
        state = "running"
    elif job.pending or job.queued:
        state = "scheduled"
    else:
        state = job.outcome or "failed"
    # the earliest new start: a pending occurrence or re-run, or one held behind a run;
    # none while paused (what it holds waits for the resume) or after it ended
    dues = [p.due for p in job.pending.values()] + ([job.queued.due] if job.queued else [])
    if state not in ("scheduled", "running"):
        dues = []
    task, args = describe_target(job.spec.target)
    return JobInfo(
        job_id=job.spec.job_id,
        schedule=job.spec.schedule.describe(),
        lane=job.spec.lane,
        state=state,
        next_run=min(dues) if dues else None,
        runs=job.runs,
        failures=job.failures,
        attempts=job.attempts,
        last_result=job.last_result,
        last_error=job.last_error,
        last_traceback=(job.last_traceback or None) if job.last_error else None,
        running=tuple(
            InvocationInfo(r.job_id, r.scheduled, r.attempt, r.fence, r.lease_until)
            for r in running
        ),
        skipped=tuple(job.skipped or ()),
        dead_letters=tuple(job.dead_letters or ()),
        task=task,
        args=args,
        trace_id="" if job.spec.trace is None else job.spec.trace.trace_id,
        priority=job.spec.priority,
        limit_key=job.spec.limit_key,
        progress=job.progress,
        result_ttl=job.spec.result_ttl,
    )
