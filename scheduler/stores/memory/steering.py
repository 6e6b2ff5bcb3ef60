"""MemoryStore's steering of jobs: cancel, pause, resume, trigger and backfill, an
operator's redo (retry, delete), and the
primitives every change of the store goes through (a pending invocation pushed or
dropped, an event recorded, a finished job retired).

A mixin of ``MemoryStore`` (its state is declared here and in views.py, set by
``MemoryStore.__init__``); each public method holds the store's one lock once.
"""

from __future__ import annotations

import itertools

from scheduler import flow
from scheduler.flow import Limit, now_ms
from scheduler.heap import DueEntry, DueHeap
from scheduler.model import Retried, describe_target
from scheduler.stores.memory import series
from scheduler.stores.memory.outcomes import MemoryOutcomes
from scheduler.stores.memory.records import JobRecord, Pending

ENDED_FOR_GOOD = ("cancelled", "succeeded")  # retry refuses these ("not_failed")


class MemorySteering(MemoryOutcomes):
    _heaps: dict[str, DueHeap]  # queue (scheduler/flow.py) -> its due heap
    _seq: itertools.count[int]

    def cancel(self, job_id: str) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.cancelled:
                return False
            prevented = bool(job.pending or job.paused or job.queued)
            self._drop_pending_locked(job)
            job.cancelled = True
            now = self.clock.now()
            self._event_locked(now, "cancelled", job_id)
            if not self._running_per_job.get(job_id):
                self._retire_locked(job, now)
            return prevented

    def pause(self, job_id: str) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.cancelled or job.paused is not None:
                return False
            for seq, p in job.pending.items():
                p.place = seq  # a resume puts it back in its place in line (FIFO)
            stash, queued = list(job.pending.values()), job.queued
            self._drop_pending_locked(job)
            # one held behind a run stays held (resume releases it if the run has ended)
            job.paused, job.queued = stash, queued
            self._event_locked(self.clock.now(), "paused", job_id)
            return True

    def resume(self, job_id: str) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.paused is None:
                return False
            now = self.clock.now()
            stash, job.paused, job.resumed = job.paused, None, now
            for p in stash:  # each in its place in line, claimable from now
                place, p.place = p.place, None
                self._push_locked(job, p, seq=place)
            if job.queued is not None and not self._running_per_job.get(job_id):
                self._release_queued_locked(job)
            self._event_locked(now, "resumed", job_id)
            due_in = job.due_in(now)
        self._wake(due_in)
        return True

    def trigger(self, job_id: str) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.cancelled:
                return False
            now = self.clock.now()
            pending = Pending(now, 1, now)
            if not job.spec.recurring:  # a one-off's run is brought forward, never doubled
                # paused, running, or a retry waits (an operator's too): none to bring forward
                first = [s for s, p in job.pending.items() if p.attempt == 1 and not p.redo]
                if job.paused is not None or not first:
                    return False
                # only that run moves (a retry an operator queued beside it stays), under
                # its seq: FIFO among the runs due at once by when it was first scheduled
                del job.pending[first[0]]
                self._heaps[job.queue].mark_stale()
                self._push_locked(job, pending, seq=first[0])
                self._event_locked(now, "triggered", job_id, now, 1, "brought forward")
            elif job.paused is not None:
                self._stash_locked(job, pending)
                self._event_locked(now, "triggered", job_id, now, 1)
            else:
                self._push_locked(job, pending)
                self._event_locked(now, "triggered", job_id, now, 1)
        self._wake(0.0)
        return True

    def backfill(self, job_id: str, start: float, end: float) -> int:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.cancelled:
                return 0
            now, wall = self.clock.now(), self.clock.wall()
            pending = min(
                (p.scheduled for p in job.pending.values() if p.k is not None), default=now
            )
            runs = [
                t
                for t in series.occurrences_between(job, start, end, now, wall)
                if t < pending and job.never_ran(t)
            ]
            for t in runs:
                self._push_locked(job, Pending(t, 1, now))
                self._event_locked(now, "backfilled", job_id, t, 1)
            if runs:
                job.backfilled = (job.backfilled or set()) | set(runs)
        if runs:
            self._wake(0.0)
        return len(runs)

    def set_limit(self, scope: str, limit: Limit | None) -> bool:
        """``FlowLimits``: declare (None: remove) the limit of ``scope``, from the next claim."""
        scope, limit = flow.declared(scope, limit)
        with self._lock:
            changed = self._flow.set_limit(scope, limit, now_ms(self.clock.now()))
        if changed:
            self._wake(0.0)
        return changed

    # ---- an operator's redo ----------------------------------------------------------

    def retry(self, job_id: str) -> Retried:
        """``Redo`` (base.py), as retry.lua does it: every dead-lettered invocation again,
        each once, due now, at attempt 1; a failed one-off is live again."""
        with self._lock:
            job = self._jobs.get(job_id) or self._history.get(job_id)
            if job is None:
                return Retried(job_id, 0, "unknown")
            if self._running_per_job.get(job_id):
                return Retried(job_id, 0, "running")
            scheds = list(dict.fromkeys(d.scheduled for d in job.dead_letters or ()))
            if job.cancelled or job.outcome in ENDED_FOR_GOOD or not scheds:
                return Retried(job_id, 0, "not_failed")
            now = self.clock.now()
            if job_id in self._history:  # a failed or abandoned one-off: live again
                del self._history[job_id]
                self._jobs[job_id] = job
                job.outcome = ""
            for t in scheds:
                if t is not None:
                    self._pend_locked(job, Pending(t, 1, now, redo=True))
            job.dead_letters = None
            self._event_locked(
                now, "retried_by_operator", job_id, detail=f"{len(scheds)} invocation(s) queued"
            )
        self._wake(0.0)
        return Retried(job_id, len(scheds))

    def retry_failed(self, task: str | None = None) -> list[Retried]:
        """``retry`` every job with dead letters (of ``task`` if given)."""
        with self._lock:
            ids = [
                j.spec.job_id
                for j in [*self._jobs.values(), *self._history.values()]
                if j.dead_letters
                and (task is None or describe_target(j.spec.target)[0] == task)
                and not self._running_per_job.get(j.spec.job_id)
                and not j.cancelled
                and j.outcome not in ENDED_FOR_GOOD
            ]
        return [self.retry(job_id) for job_id in ids]

    def delete(self, job_id: str) -> bool:
        """``Redo`` (base.py): the job and what it keeps are gone; a running invocation may
        finish, and its outcome is dropped."""
        with self._lock:
            job = self._jobs.pop(job_id, None) or self._history.pop(job_id, None)
            if job is None:
                return False
            self._drop_pending_locked(job)
            self._event_locked(self.clock.now(), "deleted", job_id)
            return True

    # ---- the primitives -------------------------------------------------------------

    def _push_locked(
        self, job: JobRecord, p: Pending, *, on_time: bool = False, seq: int | None = None
    ) -> float:
        """Put ``p`` in its lane; ready (dispatch lag counts from) at its due time if
        ``on_time`` (its series held it: the next occurrence, one queued behind a run),
        or at the job's resume if that came later (a resumed series' backlog), else from
        now for a time already past. ``seq``: its place among the entries due
        at the same instant (default: after every entry pushed so far); one reused moves
        an invocation to ``p.due`` keeping its place, its old entry stale (``_is_live``
        checks the due time too)."""
        now = self.clock.now()
        p.ready = max(p.due, job.resumed) if on_time else max(p.due, now)
        if seq is None:
            seq = next(self._seq)
        job.pending[seq] = p
        heap = self._heaps.get(job.queue)
        if heap is None:
            heap = self._heaps[job.queue] = DueHeap()
        heap.push(DueEntry(p.due, seq, job.spec.job_id, job.generation))
        if job.queue is not job.spec.lane:
            self._flow.pushed(job.queue, p.due)
        return max(0.0, p.due - now)

    def _release_queued_locked(self, job: JobRecord) -> float:
        """The occurrence held behind the job's run (overlap=queue, or a catch-up series
        parked) is due: its run ended, or the job resumed after it did. Returns its due-in."""
        assert job.queued is not None
        queued, job.queued = job.queued, None
        ready = queued.ready  # a held occurrence keeps it (a resume's instant: lag)
        pushed = self._push_locked(job, queued, on_time=True)
        queued.ready = max(queued.ready, ready)
        return pushed

    def _pend_locked(self, job: JobRecord, p: Pending) -> float | None:
        """A new start of a job (a retry, a re-run after a lost lease, a run handed back):
        due in its lane, or kept in the stash while the job is paused (a pause holds every
        new start, docs/guarantees.md). Returns the due-in to wake dispatchers with, or
        None (stashed)."""
        if job.paused is not None:
            self._stash_locked(job, p)
            return None
        return self._push_locked(job, p)

    def _stash_locked(self, job: JobRecord, p: Pending) -> None:
        """Keep new start ``p`` of paused ``job`` aside, in the place in line it takes now
        (its resume keeps it, as Redis keeps a stashed member's sequence number)."""
        p.place = next(self._seq)
        assert job.paused is not None
        job.paused.append(p)

    def _drop_pending_locked(self, job: JobRecord) -> None:
        heap = self._heaps.get(job.queue)
        if heap is not None:
            heap.mark_stale(len(job.pending))
        job.pending.clear()
        job.paused = None
        job.queued = None

    def _event_locked(
        self,
        now: float,
        kind: str,
        job_id: str,
        scheduled: float | None = None,
        attempt: int | None = None,
        detail: str = "",
    ) -> None:
        self._events.append((now, kind, job_id, scheduled, attempt, detail, None))
        book = self._book  # a handle waits for this job: tell it (outcomes.py)
        if book is not None and (job_id in book.watched or job_id in book.keeping):
            self._told_locked(book, kind, job_id, scheduled, detail)

    def _retire_locked(self, job: JobRecord, now: float) -> None:
        del self._jobs[job.spec.job_id]
        self._history.keep(job, now)
