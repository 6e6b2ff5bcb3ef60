"""MemoryStore: the in-process store and the reference implementation of ``Store``.

One lock guards everything; each public method holds it once, so each is atomic.
Pending invocations live in one ``DueHeap`` per lane; a heap entry is live iff its
``seq`` is still in its job's ``pending`` map (cancel, replace, pause and claim make
entries stale in O(1) without touching the heap).

Costs (n = pending invocations): add O(log n); cancel O(p) for the job's own p pending
entries (usually 1); claim O(log n) per invocation, plus O(log n) per stale entry it
drops; complete/fail O(1) (+O(log n) when it makes something pending).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.clock import Clock, MonotonicClock
from scheduler.flow import ms_up, now_ms
from scheduler.heap import DueEntry, DueHeap, earliest
from scheduler.model import Claim, ClaimBatch, Commit, Delivery, Event, Misfire, Overlap, Skip
from scheduler.stores.base import TRACEBACK_MAX, WakeListener
from scheduler.stores.memory import series
from scheduler.stores.memory.adding import MemoryAdding
from scheduler.stores.memory.flow import FlowBook
from scheduler.stores.memory.outcomes import FinishedJobs
from scheduler.stores.memory.records import JobRecord, Pending, Running, defers, rerun_due


@dataclass
class _Claiming:
    """One ``claim_due`` call: its time, lease and owner, and what it has decided."""

    now: float
    lease: float | None
    owner: str
    claims: list[Claim] = field(default_factory=list)
    batch_jobs: set[str] = field(default_factory=set)  # series claimed in this call
    reran: set[str] = field(default_factory=set)  # jobs a re-run of which it claimed
    deferred: list[tuple[str, DueEntry]] = field(default_factory=list)  # (queue, entry)


class MemoryStore(MemoryAdding):
    """Thread-safe in-process store. Several engines may share one instance.

    It records successes in batches too (``complete_many``, the ``BatchAcks`` protocol:
    each item as ``complete`` would, all under one lock hold), so engines over it claim
    ahead and acknowledge in batches like engines over Redis."""

    default_lease: float | None = None

    def __init__(
        self, clock: Clock | None = None, *, history: int = 1000, event_log: int = 10_000
    ) -> None:
        self.clock: Clock = clock or MonotonicClock()
        self._lock = threading.Lock()
        self._jobs: dict[str, JobRecord] = {}
        self._heaps: dict[str, DueHeap] = {}
        self._running: dict[str, Running] = {}  # token -> running invocation
        self._running_per_job: dict[str, int] = {}  # job id -> running invocations
        self._leases: list[tuple[float, str]] = []  # (lease_until, token), lazily validated
        self._seq = itertools.count()
        self._generations = itertools.count(1)
        self._fence = 0
        self._last_id = 0
        self._history = FinishedJobs(self.clock, history)  # finished jobs (outcomes.py)
        # the event log keeps plain tuples in ``Event``'s field order (cheaper to build on
        # every claim and success); ``events()`` returns them as ``Event``s
        self._events: deque[tuple[Any, ...]] = deque(maxlen=event_log)
        self._listeners: tuple[WakeListener, ...] = ()
        self._flow = FlowBook()  # priorities, turns, limits (docs/flow-control.md)

    # ---- producers -------------------------------------------------------------------

    def next_id(self) -> int:
        with self._lock:
            self._last_id += 1
            return self._last_id

    # ---- the dispatcher's side ---------------------------------------------------------

    def claim_due(self, capacity: Mapping[str, int], lease: float | None, owner: str) -> ClaimBatch:
        with self._lock:
            now = self.clock.now()
            woke = self._reap_locked(now)
            c = _Claiming(now, lease, owner)
            left = {lane: n for lane, n in capacity.items() if n > 0}
            flowing: dict[str, int] = {}  # lanes with flow queues (priorities, keys)
            for lane in [lane for lane in left if self._flow.flows(lane)]:
                flowing[lane] = self._flow.claim_lane(
                    lane,
                    left.pop(lane),
                    now_ms(now),
                    lambda q: self._head_locked(q, c),
                    lambda q, n: self._take_locked(c, q, n),
                )
            plain = dict(left)
            while left:
                if len(left) == 1:  # one lane asks (the usual case): its heap alone
                    (lane,) = left
                    heap = self._heaps.get(lane)
                    entry = None if heap is None else heap.peek(self._is_live)
                else:
                    lane, entry = earliest(self._heaps, left, self._is_live)
                if entry is None or entry.due > now:
                    break
                if self._take_entry_locked(c, lane, entry):
                    left[lane] -= 1
                    if not left[lane]:
                        del left[lane]
            for heap in self._heaps.values():
                heap.compact(self._is_live)
            asking = [lane for lane in plain if lane in left]
            for lane, n in flowing.items():
                if n:
                    asking += self._flow.queues(lane)
            got = [self._flow.next_turn(lane) for lane, n in flowing.items() if n]
            turns = [t / 1000 for t in got if t is not None]  # ms: the stores' unit
            next_due_in = self._next_due_in_locked(asking, now, turns)
            for queue, entry in c.deferred:  # the end of the run they wait for wakes the claim
                self._heaps[queue].push(entry)
        if woke:
            self._wake(0.0)
        return ClaimBatch(c.claims, next_due_in, now, now)

    def _take_locked(self, c: _Claiming, queue: str, n: int) -> int:
        """Claim up to ``n`` invocations from ``queue`` (its due entries in order)."""
        heap, got = self._heaps.get(queue), 0
        while heap is not None and got < n:
            entry = heap.peek(self._is_live)
            if entry is None or entry.due > c.now:
                break
            if self._take_entry_locked(c, queue, entry):
                got += 1
        return got

    def _head_locked(self, queue: str, c: _Claiming) -> int | None:
        """``queue``'s first due (ms), with what claim ``c`` set aside (Redis keeps those)."""
        heap = self._heaps.get(queue)
        entry = None if heap is None else heap.peek(self._is_live)
        dues = [e.due for q, e in c.deferred if q == queue and self._is_live(e)]
        if entry is not None:
            dues.append(entry.due)
        return ms_up(min(dues)) if dues else None

    def _take_entry_locked(self, c: _Claiming, queue: str, entry: DueEntry) -> bool:
        """Decide about ``entry``, the due head of ``queue``: set it aside for the rest of
        the claim, or admit it. True if it became a claim."""
        job = self._jobs[entry.job_id]
        pending = job.pending[entry.seq]
        if (entry.job_id in c.batch_jobs and defers(job, pending)) or (
            pending.k is not None and (entry.job_id in c.reran or rerun_due(job, c.now))
        ):
            c.deferred.append((queue, self._heaps[queue].pop()))  # judged once its run
            return False  # (claimed just now, or a re-run: first) has ended; others go on
        self._heaps[queue].pop()
        del job.pending[entry.seq]
        claim = self._admit_locked(job, pending, c.now, c.lease, c.owner)
        if claim is None:
            return False
        # an occurrence of a series, or a re-run (it goes first: docs/guarantees.md)
        (c.batch_jobs if pending.k is not None else c.reran).add(claim.job_id)
        c.claims.append(claim)
        return True

    def _admit_locked(
        self, job: JobRecord, p: Pending, now: float, lease: float | None, owner: str
    ) -> Claim | None:
        """Turn a due pending invocation into a claim, or record why it does not run."""
        spec = job.spec
        scheduled, attempt, stalls = p.scheduled, p.attempt, p.stalls
        if p.k is not None and spec.recurring:  # overlap and misfire: series only
            busy = (
                self._running_per_job.get(spec.job_id, 0) > 0 and spec.overlap is not Overlap.ALLOW
            )
            if busy and spec.misfire is Misfire.CATCH_UP:
                job.queued = p  # catch_up skips nothing: park the series until the run ends
                return None
            step = series.step(job, p, now, self.clock.wall())
            if step.skip is not None:
                self._skip_locked(job, now, step.skip)
            if step.next is not None:
                self._push_locked(job, step.next, on_time=True)
            if step.run is None:
                return None
            scheduled = step.run
            if busy:
                if spec.overlap is Overlap.QUEUE and job.queued is None:
                    job.queued = Pending(scheduled, 1, scheduled, ready=p.ready)
                else:
                    reason = "overlap" if spec.overlap is Overlap.SKIP else "overlap-queue-full"
                    self._skip_locked(job, now, Skip(scheduled, scheduled, 1, reason))
                return None
        self._fence += 1
        token = f"{owner}:{self._fence}"
        lease_until = None if lease is None else now + lease
        ready = max(scheduled, p.ready)
        self._running[token] = Running(
            spec.job_id,
            job.generation,
            scheduled,
            attempt,
            self._fence,
            lease_until,
            spec,
            stalls,
            ready,
        )
        self._running_per_job[spec.job_id] = self._running_per_job.get(spec.job_id, 0) + 1
        within = None if spec.limit_key is None else self._flow.started(spec, now_ms(now))
        if lease_until is not None:
            heapq.heappush(self._leases, (lease_until, token))
        job.attempts = attempt
        self._event_locked(now, "claimed", spec.job_id, scheduled, attempt, owner)
        return Claim(
            spec.job_id,
            scheduled,
            attempt,
            token,
            self._fence,
            lease_until,
            spec,
            job.generation,
            spec.lane,
            ready,
            within,
            job.told(),
        )

    def renew(self, claims: Sequence[Claim], lease: float) -> list[Commit]:
        with self._lock:
            now = self.clock.now()
            out = []
            for c in claims:
                r = self._owned_locked(c, now)
                if isinstance(r, Commit):
                    out.append(Commit.LEASE_LOST)
                    continue
                r.lease_until = now + lease
                heapq.heappush(self._leases, (r.lease_until, c.token))
                out.append(Commit.OK)
            return out

    def complete(self, claim: Claim, result: Any) -> Commit:
        return self._finish(claim, "succeeded", result=result)

    def complete_many(self, done: Sequence[tuple[Claim, Any]]) -> list[Commit]:
        """``complete`` for each ``(claim, result)``, in order, under one lock hold (each
        item token-checked and recorded on its own, as ``complete`` does)."""
        out: list[Commit] = []
        woke: float | None = None
        with self._lock:
            now = self.clock.now()
            for claim, result in done:
                commit, due_in = self._finish_locked(claim, now, "succeeded", result=result)
                out.append(commit)
                if due_in is not None:
                    woke = due_in if woke is None else min(woke, due_in)
        if woke is not None:
            self._wake(woke)
        return out

    def fail(self, claim: Claim, error: str, retry_in: float | None, traceback: str = "") -> Commit:
        tb = traceback.encode()[-TRACEBACK_MAX:].decode(errors="ignore")
        return self._finish(claim, "failed", error=error, retry_in=retry_in, traceback=tb)

    def end_interrupted(self, claim: Claim, detail: str) -> Commit:
        return self._finish(claim, "interrupted", error=detail)

    def release(self, claim: Claim) -> Commit:
        return self._finish(claim, "released")

    def _finish(self, claim: Claim, how: str, **outcome: Any) -> Commit:
        with self._lock:
            commit, woke = self._finish_locked(claim, self.clock.now(), how, **outcome)
        if woke is not None:
            self._wake(woke)
        return commit

    def _finish_locked(
        self,
        claim: Claim,
        now: float,
        how: str,
        *,
        result: Any = None,
        error: str = "",
        retry_in: float | None = None,
        traceback: str = "",
    ) -> tuple[Commit, float | None]:
        """Record the end of ``claim``'s invocation; the commit, and a due-in to wake the
        dispatchers with if something became pending."""
        r = self._owned_locked(claim, now)
        if isinstance(r, Commit):
            return r, None
        del self._running[claim.token]
        self._running_per_job[r.job_id] -= 1
        freed = r.spec.limit_key is not None and self._flow.ended(r.spec, now_ms(now))
        job = self._jobs.get(r.job_id)
        if job is not None:
            job.last_token = claim.token
        same = job is not None and job.generation == r.generation and not job.cancelled
        woke = None
        if how == "released":
            self._event_locked(now, "released", r.job_id, r.scheduled, r.attempt)
            if same:
                assert job is not None
                # a clean hand-back: no stall, and the owners lost before still count
                p = Pending(r.scheduled, r.attempt, r.scheduled, stalls=r.stalls)
                woke = self._pend_locked(job, p)
                if woke is not None:  # queued again: ready as when claimed (a resume: then)
                    p.ready = r.ready
        elif how == "succeeded":
            if job is not None:  # recorded before its event: a handle told by it reads it
                job.runs += 1
                job.last_result, job.last_error = result, None
            self._event_locked(now, "succeeded", r.job_id, r.scheduled, r.attempt)
        elif how == "interrupted":  # an operator's stop, not a failure (base.py)
            self._event_locked(now, "interrupted", r.job_id, r.scheduled, r.attempt, error)
            how = "cancelled"  # how its job settles
        elif retry_in is not None and same:
            assert job is not None
            job.last_error, job.last_traceback = error, traceback
            self._event_locked(now, "retried", r.job_id, r.scheduled, r.attempt, error)
            woke = self._pend_locked(
                job, Pending(r.scheduled, r.attempt + 1, now + retry_in, stalls=r.stalls)
            )
        else:
            self._event_locked(now, "failed", r.job_id, r.scheduled, r.attempt, error)
            if job is not None:
                job.failures += 1
                job.last_error, job.last_traceback = error, traceback
                job.note_dead_letter(
                    Event(now, "dead_lettered", r.job_id, r.scheduled, r.attempt, error)
                )
        if job is not None:
            settled = self._settle_locked(job, now, how)
            woke = woke if settled is None else (settled if woke is None else min(woke, settled))
        if freed:  # a queue waited for a slot of this key: claim again
            woke = 0.0
        return Commit.OK, woke

    def _settle_locked(self, job: JobRecord, now: float, how: str) -> float | None:
        """After an invocation ended: release a queued occurrence, retire a finished job.
        Returns a due-in to wake the dispatchers with, if something became pending."""
        left = self._running_per_job.get(job.spec.job_id, 0)
        if left > 0:
            if how != "released":  # what it ends as if a run handed back ends last
                job.ended = how
            return None
        self._running_per_job.pop(job.spec.job_id, None)
        outcome = how if how != "released" else job.ended  # a hand-back is no outcome
        if not job.pending and job.queued is None and not job.cancelled:
            # a one-off that ended, paused or not (paused while it ran: its stash is empty,
            # and a resume had nothing to run: it stayed live, never retired)
            if not job.paused and not job.spec.recurring and outcome:
                job.outcome, job.paused = outcome, None
                self._retire_locked(job, now)
            return None
        # an occurrence deferred while this run was claimed (due now): claim it now
        woke = 0.0 if job.pending and job.due_in(now) == 0.0 else None
        if job.queued is not None and not job.cancelled and job.paused is None:
            pushed = self._release_queued_locked(job)
            return pushed if woke is None else min(woke, pushed)
        if job.cancelled:
            self._retire_locked(job, now)
        elif not job.spec.recurring and not job.pending and not job.paused and outcome:
            job.outcome, job.paused = outcome, None
            self._retire_locked(job, now)
        return woke

    def _owned_locked(self, claim: Claim, now: float) -> Running | Commit:
        r = self._running.get(claim.token)
        if r is None:
            job = self._jobs.get(claim.job_id) or self._history.get(claim.job_id)
            if job is not None and job.last_token == claim.token:
                return Commit.OK  # a resend of a commit that already happened
            return Commit.NOT_FOUND if job is None else Commit.LEASE_LOST
        if r.lease_until is not None and now >= r.lease_until:
            return Commit.LEASE_LOST
        return r

    def _reap_locked(self, now: float) -> bool:
        """Expired leases: attempt+1 (at-least-once), or abandoned / dead-lettered; in the
        order the leases ended, then by scheduled time and job (as Redis: its re-runs
        queue in that order, whatever fences the claims handed out)."""
        woke = False
        expired = {}  # token -> sort key: a lease renewed to its own deadline is there twice
        while self._leases and self._leases[0][0] <= now:
            lease_until, token = heapq.heappop(self._leases)
            r = self._running.get(token)
            if r is None or r.lease_until != lease_until:
                continue  # finished, or renewed (a newer heap entry exists)
            expired[token] = (lease_until, r.scheduled, r.job_id, token)
        for *_, token in sorted(expired.values()):
            r = self._running[token]
            del self._running[token]
            self._running_per_job[r.job_id] -= 1
            if r.spec.limit_key is not None and self._flow.ended(r.spec, now_ms(now)):
                woke = True  # a queue waited for a slot of this key
            job = self._jobs.get(r.job_id)
            live = job is not None and job.generation == r.generation and not job.cancelled
            self._event_locked(now, "lease_lost", r.job_id, r.scheduled, r.attempt)
            how = "failed"
            if live and r.spec.delivery is Delivery.AT_MOST_ONCE:
                how = "abandoned"
                self._event_locked(now, "abandoned", r.job_id, r.scheduled, r.attempt)
            elif live and r.stalls + 1 < r.spec.retry.max_stalls:
                assert job is not None
                pend = Pending(r.scheduled, r.attempt + 1, now, stalls=r.stalls + 1)
                woke = self._pend_locked(job, pend) is not None or woke
            elif job is not None:
                ev = Event(now, "dead_lettered", r.job_id, r.scheduled, r.attempt, "lease lost")
                self._event_locked(*ev[:6])  # a handle waiting for it is told
                job.note_dead_letter(ev)
            if job is not None:
                self._settle_locked(job, now, how)
        return woke

    # ---- internals ---------------------------------------------------------------------

    def _is_live(self, e: DueEntry) -> bool:
        """Is ``e`` its pending invocation's current entry? (A trigger re-pushes a one-off
        under its ``seq`` at a new due time: the old entry, due otherwise, is stale.)"""
        job = self._jobs.get(e.job_id)
        if job is None or job.generation != e.generation:
            return False
        p = job.pending.get(e.seq)
        return p is not None and p.due == e.due

    def _next_due_in_locked(
        self, queues: Iterable[str], now: float, turns: Sequence[float] = ()
    ) -> float | None:
        _, entry = earliest(self._heaps, queues, self._is_live)
        nxt = None if entry is None else entry.due
        if turns:
            nxt = min(turns) if nxt is None else min(nxt, *turns)
        while self._leases and not self._lease_live(*self._leases[0]):
            heapq.heappop(self._leases)  # finished, or renewed (a later entry holds it)
        if self._leases:
            nxt = self._leases[0][0] if nxt is None else min(nxt, self._leases[0][0])
        return None if nxt is None else max(0.0, nxt - now)

    def _lease_live(self, lease_until: float, token: str) -> bool:
        """Is this lease-heap entry its invocation's current deadline?"""
        r = self._running.get(token)
        return r is not None and r.lease_until == lease_until

    def _skip_locked(self, job: JobRecord, now: float, skip: Skip) -> None:
        job.note_skip(skip)
        why = f"{skip.count} occurrence(s): {skip.reason}"
        self._event_locked(now, "skipped", job.spec.job_id, skip.first, None, why)
