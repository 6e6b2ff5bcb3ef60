"""The store interface: the one seam between the dispatcher and where jobs live.

Every method is one atomic step (one lock hold in ``MemoryStore``, one Lua script in a
Redis store), so each is a linearization point:

* ``add`` - the job becomes visible to claims (or an equal definition is left alone);
* ``cancel`` - no new invocation of the job can be claimed after it returns;
* ``claim_due`` - an invocation moves from pending to RUNNING under one owner's token.

The store, not the dispatcher, judges "due" with its own clock. A dispatcher that asks
too early just gets an empty batch and the time to wait. Every write about a claimed
invocation (``renew``, ``complete``, ``fail``, ``release``) presents the claim's token
and is refused with ``Commit.LEASE_LOST`` when that token no longer owns it.

Optional capabilities are typed protocols below, checked with ``isinstance`` (never by
probing attributes): ``BatchAcks`` (a store whose calls are costly, Redis, takes
``complete`` for a batch in one call; engines then acknowledge successes in batches and
claim whole batches, ``Scheduler(lookahead=...)``; ``claim_due`` may then be asked for more
than it hands out in one call, the Redis store's cap is 100 per lane, and answers
``next_due_in == 0`` when a lane filled a whole batch and has room for more),
``AcksWithClaims`` (a batch of successes sent with a claim, in one round trip), ``BulkAdd``,
``ServerChecks``, ``Resyncing``, ``HasClock``, ``Closable``, ``ServesTasks``, ``Upkeep``,
``QueueDepths``, ``Outcomes`` (handles wait for results) and ``ReportsProgress``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from scheduler.clock import Clock
from scheduler.flow import FlowState, Limit
from scheduler.limit_usage import TOP_KEYS, Hold, ScopeUsage
from scheduler.model import (
    AddResult,
    Claim,
    ClaimBatch,
    Commit,
    Event,
    JobInfo,
    JobSpec,
    Outcome,
    Quarantined,
    Reconciled,
    Retried,
)

WakeListener = Callable[[float | None], None]


TRACEBACK_MAX = 8192  # bytes of a failure's traceback a store keeps (the end of it)


class Store(Protocol):
    #: Lease used by engines that do not choose one. ``None``: claims never expire
    #: (an in-process owner cannot die without its store).
    default_lease: float | None

    def next_id(self) -> int:
        """A new integer job id, unique in this store (``JobScheduler`` ids)."""
        ...

    def add(self, spec: JobSpec) -> AddResult:
        """Insert, replace (changed definition: pending occurrences of the old one never
        run) or keep (equal definition: no-op, anchor kept). Wakes subscribers."""
        ...

    def cancel(self, job_id: str) -> bool:
        """Remove the job's pending and future invocations. True iff that prevented at
        least one start. A RUNNING invocation is not interrupted and may complete."""
        ...

    def pause(self, job_id: str) -> bool:
        """Stop claiming the job until ``resume``. True iff it was active and not paused."""
        ...

    def resume(self, job_id: str) -> bool:
        """Make a paused job claimable again (missed occurrences follow its misfire
        policy). True iff it was paused."""
        ...

    def trigger(self, job_id: str) -> bool:
        """Add one run of a live job, due now, outside its schedule (recorded as
        "triggered"). False if the job is unknown, finished or cancelled."""
        ...

    def backfill(self, job_id: str, start: float, end: float) -> int:
        """Queue a run, due now, of every occurrence of the recurring job whose wall time
        lies in [start, end) (epoch seconds), before its pending occurrence, that never
        ran: it precedes the series, or was recorded as skipped, and no earlier backfill
        queued it. Each keeps its invocation identity (job id + scheduled instant).
        Returns how many were queued; 0 for an unknown or cancelled job. Raises
        ValueError for a one-off job or a window of more than 10,000 occurrences."""
        ...

    def claim_due(self, capacity: Mapping[str, int], lease: float | None, owner: str) -> ClaimBatch:
        """Claim, in (due, submission) order, up to ``capacity[lane]`` due invocations per
        lane; lanes not in ``capacity`` are not served. Also reaps expired leases.
        ``next_due_in`` covers lanes with capacity left, and the next lease expiry."""
        ...

    def renew(self, claims: Sequence[Claim], lease: float) -> list[Commit]:
        """Extend each claim's lease to now + ``lease`` if its token still owns it."""
        ...

    def complete(self, claim: Claim, result: Any) -> Commit:
        """Record success. Refused (LEASE_LOST) if the token no longer owns the invocation
        or its lease has expired."""
        ...

    def fail(self, claim: Claim, error: str, retry_in: float | None, traceback: str = "") -> Commit:
        """Record a failure; retry the invocation (attempt+1) after ``retry_in`` seconds,
        or, with ``None``, record it as failed and dead-lettered. Token-checked.
        ``traceback``: the error's traceback, kept beside the last error (its last
        ``TRACEBACK_MAX`` bytes)."""
        ...

    def end_interrupted(self, claim: Claim, detail: str) -> Commit:
        """Record that an operator's interrupt (``cancel(interrupt=True)``, which cancelled
        the job first) ended the invocation: not a failure, so no retry, no dead letter,
        the last error and failure count untouched; an ``interrupted`` event with
        ``detail``, and the job settles as cancelled. Token-checked."""
        ...

    def release(self, claim: Claim) -> Commit:
        """Return a claimed but unstarted invocation at once (same attempt). Token-checked."""
        ...

    def get(self, job_id: str) -> JobInfo | None:
        """A snapshot of one job (live, or recently finished), or None."""
        ...

    def jobs(self) -> list[JobInfo]:
        """Snapshots of every live job, earliest next run first."""
        ...

    def events(self, limit: int = 100) -> list[Event]:
        """The most recent state changes, oldest first."""
        ...

    def subscribe(self, listener: WakeListener) -> Callable[[], None]:
        """Call ``listener(due_in)`` whenever an invocation becomes pending (from any
        producer). Returns a function that unsubscribes."""
        ...


# ---- optional capabilities ------------------------------------------------------------------


@runtime_checkable
class BatchAcks(Protocol):
    """A store that records many successes in one call."""

    def complete_many(self, done: Sequence[tuple[Claim, Any]]) -> list[Commit]:
        """``complete`` for each ``(claim, result)``, in one call; one outcome per item,
        in order (each item atomic on its own)."""
        ...


class AckedClaim(NamedTuple):
    """What ``AcksWithClaims.complete_and_claim`` returns: one outcome per success sent
    (``None``: not recorded, the caller records it again; a resend is safe, commits are
    token-checked), and the claim's batch, or the error that stopped the claim."""

    acks: list[Commit | None]
    batch: ClaimBatch | None
    error: Exception | None


@runtime_checkable
class AcksWithClaims(Protocol):
    """A store whose calls cost a round trip (Redis): a batch of successes travels with
    the next claim."""

    def complete_and_claim(
        self,
        done: Sequence[tuple[Claim, Any]],
        capacity: Mapping[str, int],
        lease: float | None,
        owner: str,
    ) -> AckedClaim:
        """``complete_many(done)``, then ``claim_due(capacity, lease, owner)``, in one round
        trip where possible (acks first: what they end frees its capacity before the claim
        judges it). Each half keeps its own guarantee: every ack token-checked and safe to
        resend, the claim's resend answered with its first reply. Never raises: the claim's
        error is ``error``, and an ack whose outcome is unknown is ``None``."""
        ...


@runtime_checkable
class BulkAdd(Protocol):
    """A store that adds many jobs in one round trip."""

    def add_many(self, specs: Sequence[JobSpec]) -> list[AddResult]:
        """``add`` for each spec, in one round trip; each add atomic on its own."""
        ...


@runtime_checkable
class ServerChecks(Protocol):
    """A store on a server whose settings can break the guarantees (Redis)."""

    def check_server(self) -> list[str]:
        """Raise if the server would break the guarantees (e.g. an eviction policy);
        return warnings (e.g. persistence off). Engines call it once at start."""
        ...


@runtime_checkable
class Resyncing(Protocol):
    """A store whose wake-ups can be lost (pub/sub): dispatchers re-claim every
    ``resync`` seconds (jittered) besides waking on them."""

    resync: float


@runtime_checkable
class HasClock(Protocol):
    """A store that judges time with a clock of its own; an engine without a clock
    shares it."""

    clock: Clock


@runtime_checkable
class Closable(Protocol):
    """A store that holds connections or threads until ``close``."""

    def close(self) -> None:
        """Release connections and threads; the store is unusable afterwards."""
        ...


@runtime_checkable
class Interrupts(Protocol):
    """A shared store (Redis) that carries a request to stop a job's running invocations
    to the replicas that run them (``cancel(interrupt=True)`` from any process)."""

    def interrupt(self, job_id: str) -> int:
        """Ask every running invocation of ``job_id`` to stop: each replica that runs one
        cancels its token at its next lease renewal (within a third of the lease).
        Returns how many are running (0: nothing was asked)."""
        ...

    def interrupted(self, job_ids: Collection[str]) -> set[str]:
        """Which of ``job_ids`` their running invocations were asked to stop."""
        ...


@runtime_checkable
class Retiring(Protocol):
    """A store that lists live replicas (Redis): an engine that stops says so."""

    def retire(self, owner: str) -> None:
        """``owner`` stopped claiming for good: drop it from the live replicas now."""
        ...


@runtime_checkable
class Redo(Protocol):
    """A store in which an operator redoes work: retry what failed, delete a job (both
    stores; a shared one through ``stores/redis/redo.py``)."""

    def retry(self, job_id: str) -> Retried:
        """Queue every dead-lettered invocation of the job again, due now, at attempt 1
        (a failed one-off is live again); refused while it runs or without dead letters."""
        ...

    def retry_failed(self, task: str | None = None) -> list[Retried]:
        """``retry`` every job with dead letters (of ``task`` if given)."""
        ...

    def delete(self, job_id: str) -> bool:
        """Remove the job and what it owns; a running invocation may finish (its outcome
        is dropped). False if there was no such job."""
        ...


@runtime_checkable
class ServesTasks(Protocol):
    """A store shared by processes with different code (Redis): a replica claims only
    invocations of the tasks it has registered; the others wait for a replica that has
    theirs (docs/guarantees.md, "Which replica runs a job")."""

    def serve(self, tasks: Callable[[], tuple[int, Sequence[str]]] | None) -> None:
        """Claim only invocations of the tasks ``tasks()`` names (a version that changes
        when the names do, and the names), read at every claim; None: every task."""
        ...


@runtime_checkable
class Upkeep(Protocol):
    """A store that can hold malformed data (Redis): the reconciler and the quarantine."""

    def reconcile(self, *, dry_run: bool = False) -> Reconciled:
        """Check every job once; repair what a crash or a past bug left behind."""
        ...

    def quarantined(self) -> list[Quarantined]:
        """What was moved aside because it did not parse, oldest first."""
        ...

    def restore(self, entry_id: str) -> str:
        """Put a quarantined job back: restored | missing | exists | no-job."""
        ...

    def purge_quarantined(self, entry_id: str) -> int:
        """Drop a quarantine entry and its data (``"*"``: all); how many were dropped."""
        ...


@runtime_checkable
class QueueDepths(Protocol):
    """A store that counts what waits in each lane (the facades' ``stats()``)."""

    def queue_depths(self) -> dict[str, tuple[int, int]]:
        """Per lane: pending invocations (not paused, not running), and how many of them
        are due now by the store's clock."""
        ...


@runtime_checkable
class FlowLimits(Protocol):
    """A store that enforces limits per key where jobs are claimed (docs/flow-control.md)."""

    def set_limit(self, scope: str, limit: Limit | None) -> bool:
        """Declare (or, with None, remove) the limit of ``scope``: a key, ``<prefix>:*`` or
        ``*``. It holds from the next claim on, fleet-wide. True if it changed."""
        ...

    def limits(self) -> dict[str, Limit]:
        """Every declared limit, by scope."""
        ...

    def flow_of(self, key: str) -> FlowState:
        """Where ``key`` stands against its limit: running, recent starts, full or not."""
        ...

    def limit_usage(self, top: int = TOP_KEYS) -> list[ScopeUsage]:
        """What waits on each declared limit now, one ``ScopeUsage`` per scope (by scope;
        [] without limits), over the keys it governs that have due or running work, with
        its ``top`` keys by due jobs waiting. Read only."""
        ...

    def hold_of(self, job_id: str) -> Hold | None:
        """What holds ``job_id`` back now: its key's limit, when the job is scheduled, due,
        and that limit is full at the time of reading; None otherwise. Raises
        ``JobNotFoundError`` for an unknown job. Read only."""
        ...


@runtime_checkable
class LimitKeyRules(Protocol):
    """A store that keeps key rules (scheduler/keyrules.py, docs/flow-control.md): a job
    added without a limit key gets its task's rule's key, else its lane's rule's."""

    def set_key_rule(
        self, template: str | None, *, task: str | None = None, lane: str | None = None
    ) -> bool:
        """Declare (None: remove) the key rule of ``task`` or ``lane`` (exactly one): it
        applies to every job added after it, by any producer. True if it changed."""
        ...

    def key_rules(self) -> dict[str, str]:
        """Every key rule: its name (``task:<name>``, ``lane:<name>``) -> its template."""
        ...


@runtime_checkable
class Outcomes(Protocol):
    """A store that tells a waiting handle how an invocation ended (docs/results.md):
    both stores."""

    def watch(
        self,
        job_id: str,
        scheduled_ms: int | None,
        deliver: Callable[[Outcome], None],
        hold: float = 0.0,
    ) -> tuple[Outcome | None, Callable[[], None]]:
        """Register ``deliver`` for the end of the job's invocation ``scheduled_ms``
        (None: a one-off's only one, or a recurring job's next to end), then read the
        stored outcome once. Returns it if the invocation already ended (``deliver`` is
        then not needed), else None: ``deliver`` is called once, from any thread, when it
        ends. The second item stops watching (always call it). ``hold``: seconds a shared
        store keeps the registration (the caller watches again after that).
        ``JobNotFoundError`` for an unknown job."""
        ...


@runtime_checkable
class ReportsProgress(Protocol):
    """A store that keeps what a running invocation reports as its progress."""

    def report_progress(self, claim: Claim, value_json: str) -> Commit:
        """Store ``value_json`` (``validation.progress_json``) as the progress of
        ``claim``'s invocation, in its job; LEASE_LOST once it no longer owns it."""
        ...
