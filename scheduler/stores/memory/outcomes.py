"""MemoryStore's results: who waits for which job's outcome (a handle's ``result()``),
the outcomes of recurring invocations kept for them, how long finished jobs are kept, and
the progress a running job reports.

A mixin of ``MemoryStore`` (under its one lock). A handle registers a ``Watch`` and reads
the stored outcome in one lock hold; the store tells the watches of a job from
``_event_locked`` (steering.py), which every end of an invocation goes through, after the
job's record holds the outcome (the lock is still held: a delivery only sets a flag or
schedules a callback). When nobody waits, that costs one attribute test per event.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler.clock import Clock
from scheduler.errors import JobNotFoundError
from scheduler.model import Claim, Commit, Outcome, Progress
from scheduler.stores.memory.records import JobRecord, Running
from scheduler.stores.memory.views import MemoryViews

KEPT_FOR = 86400.0  # seconds results are kept by default (a job's result_ttl: its own)
KEPT_MAX = 10_000  # recurring invocations' outcomes kept at most (the oldest go first)

# the event kinds that end an invocation for good, and the outcome state each is
ENDS = {"succeeded": "succeeded", "failed": "failed", "interrupted": "interrupted"}
ENDS |= {"abandoned": "abandoned", "cancelled": "cancelled", "dead_lettered": "failed"}


@dataclass(eq=False)
class Watch:
    scheduled_ms: int | None  # None: a one-off's outcome, or a recurring job's next end
    deliver: Callable[[Outcome], None]


class FinishedJobs(OrderedDict[str, JobRecord]):
    """Finished jobs, oldest first: the last ``limit``, each until its ``kept_until`` (its
    ``result_ttl`` after it ended, else ``KEPT_FOR``: docs/results.md), as a shared store
    expires a finished job's hash. One past it reads as absent (and is dropped)."""

    def __init__(self, clock: Clock, limit: int) -> None:
        super().__init__()
        self._clock, self._limit = clock, limit

    def keep(self, job: JobRecord, now: float) -> None:
        """``job`` ended at ``now`` (store clock): kept from then."""
        job.kept_until = now + (job.spec.result_ttl or KEPT_FOR)
        self[job.spec.job_id] = job
        while len(self) > self._limit:
            self.popitem(last=False)

    def get(self, job_id: str, default: Any = None) -> Any:
        job = super().get(job_id)
        if job is None:
            return default
        if job.kept_until <= self._clock.now():
            del self[job_id]
            return default
        return job

    def __contains__(self, job_id: object) -> bool:
        return self.get(job_id) is not None  # type: ignore[arg-type]

    def pop(self, job_id: str, default: Any = None) -> Any:
        job = self.get(job_id)
        if job is not None:
            del self[job_id]
        return default if job is None else job

    def values(self) -> list[JobRecord]:  # type: ignore[override]
        now = self._clock.now()
        return [j for j in super().values() if j.kept_until > now]


@dataclass
class OutcomeBook:
    watched: dict[str, list[Watch]] = field(default_factory=dict)
    keeping: set[str] = field(default_factory=set)  # recurring jobs with a result_ttl
    # (job, scheduled ms) -> (outcome, kept until, store clock): waited-for recurring runs
    kept: OrderedDict[tuple[str, int], tuple[Outcome, float]] = field(default_factory=OrderedDict)


def decoded(value: Any) -> Any:
    """A result as a shared store gives it back (JSON's types: a tuple is a list)."""
    if value is None or type(value) in (str, int, bool):
        return value
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return value


class MemoryOutcomes(MemoryViews):
    clock: Clock
    _lock: threading.Lock
    _jobs: dict[str, JobRecord]
    _history: FinishedJobs
    _running: dict[str, Running]
    _running_per_job: dict[str, int]
    _book: OutcomeBook | None = None  # created by the first watch

    def watch(
        self,
        job_id: str,
        scheduled_ms: int | None,
        deliver: Callable[[Outcome], None],
        hold: float = 0.0,
    ) -> tuple[Outcome | None, Callable[[], None]]:
        """``Outcomes.watch`` (stores/base.py): the stored outcome if there is one, else
        ``deliver`` is called (under the store's lock) when the invocation ends. ``hold``
        matters to a shared store only."""
        with self._lock:
            job = self._jobs.get(job_id) or self._history.get(job_id)
            if job is None:
                raise JobNotFoundError(job_id)
            known = self._stored_locked(job, scheduled_ms)
            if known is not None:
                return known, _nothing
            book = self._book = self._book or OutcomeBook()
            w = Watch(scheduled_ms, deliver)
            book.watched.setdefault(job_id, []).append(w)

        def stop() -> None:
            with self._lock:
                ws = book.watched.get(job_id)
                if ws and w in ws:
                    ws.remove(w)
                    if not ws:
                        del book.watched[job_id]

        return None, stop

    def _stored_locked(self, job: JobRecord, scheduled_ms: int | None) -> Outcome | None:
        job_id = job.spec.job_id
        idle = self._running_per_job.get(job_id, 0) == 0
        if job.spec.recurring:
            book, key = self._book, (job_id, scheduled_ms)
            kept = None if book is None or scheduled_ms is None else book.kept.get(key)  # type: ignore[arg-type]
            if kept is not None and kept[1] > self.clock.now():
                return kept[0]
            return Outcome(job_id, None, "cancelled") if job.cancelled and idle else None
        if job.outcome == "succeeded":
            return Outcome(job_id, None, "succeeded", decoded(job.last_result))
        if job.outcome in ("failed", "abandoned"):
            return Outcome.ended(job_id, None, job.outcome, job.last_error or "")
        if job.outcome == "cancelled" or (job.cancelled and idle):
            return Outcome(job_id, None, "cancelled")
        return None

    def _told_locked(
        self, book: OutcomeBook, kind: str, job_id: str, sched: Any, detail: str
    ) -> None:
        """An event of a watched job (``_event_locked``): tell the watches it ends."""
        state = ENDS.get(kind)
        job = self._jobs.get(job_id) or self._history.get(job_id)
        if state is None or job is None:
            return
        if state == "cancelled":
            if self._running_per_job.get(job_id, 0) > 0:
                return  # its run ends it (and says how)
            ended = Outcome(job_id, None, "cancelled")
        else:
            ms = None if sched is None else round(sched * 1000)
            ended = Outcome.ended(job_id, ms, state, detail)
            if state == "succeeded":
                ended = Outcome(job_id, ms, state, decoded(job.last_result))
        watches = book.watched.get(job_id, [])
        told = [w for w in watches if _matches(w, ended)]
        # a recurring run's outcome: kept if it has a result_ttl, or a handle waited for it
        ms = ended.scheduled_ms
        if job.spec.recurring and ms is not None and (told or job.spec.result_ttl is not None):
            ttl = job.spec.result_ttl or KEPT_FOR
            book.kept[(job_id, ms)] = (ended, self.clock.now() + ttl)
            while len(book.kept) > KEPT_MAX:
                book.kept.popitem(last=False)
        for w in told:
            watches.remove(w)
            w.deliver(ended)
        if not watches:
            book.watched.pop(job_id, None)

    def report_progress(self, claim: Claim, value_json: str) -> Commit:
        """Store what ``claim``'s running invocation reports (JSON text, checked by the
        caller) in its job's record; refused (LEASE_LOST) once it no longer owns it."""
        with self._lock:
            r = self._running.get(claim.token)
            if r is None or (r.lease_until is not None and self.clock.now() >= r.lease_until):
                return Commit.LEASE_LOST
            job = self._jobs.get(claim.job_id)
            if job is None:
                return Commit.NOT_FOUND
            job.progress = Progress(claim.scheduled_ms, self.clock.wall(), json.loads(value_json))
            return Commit.OK


def _matches(w: Watch, ended: Outcome) -> bool:
    return w.scheduled_ms is None or ended.scheduled_ms in (None, w.scheduled_ms)


def _nothing() -> None:
    pass
