"""The data that crosses the store interface: immutable records, no I/O.

Times named ``*_at``/``scheduled``/``due`` are in the *store's* clock (monotonic seconds
for ``MemoryStore``, epoch seconds for ``RedisStore``); durations are seconds.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from scheduler import timeinput
from scheduler.errors import JobNotFoundError

#: The default misfire grace is one interval (a calendar's gap to its next occurrence), at
#: most this many seconds.
GRACE_CAP = 60.0


class Misfire(str, enum.Enum):
    """What to do with occurrences of a recurring job that were missed (claimed more than
    ``misfire_grace`` after their due time: downtime, pause, saturated workers)."""

    SKIP = "skip"  # record them as skipped; next run is the first grid point after now
    RUN_ONCE = "run_once"  # coalesce them into one run now (the latest one), record the rest
    CATCH_UP = "catch_up"  # run each of them, in order


class Overlap(str, enum.Enum):
    """What to do when an occurrence is due while an earlier invocation still runs."""

    SKIP = "skip"  # record the occurrence as skipped (reason "overlap")
    ALLOW = "allow"  # run it concurrently
    QUEUE = "queue"  # hold one occurrence until the running one ends; more are skipped


class Delivery(str, enum.Enum):
    """What happens to an invocation whose owner lost its lease (died, stalled)."""

    AT_LEAST_ONCE = "at_least_once"  # claimed again with attempt+1 and a higher fence
    AT_MOST_ONCE = "at_most_once"  # recorded as abandoned, never run again


class Commit(str, enum.Enum):
    """The answer of a token-checked write (complete, fail, release, renew)."""

    OK = "ok"
    LEASE_LOST = "lease_lost"  # the token is no longer the invocation's owner
    NOT_FOUND = "not_found"  # the store knows no such job
    # the invocation's data in the store did not parse (its job, or its RUNNING entry): it
    # was moved aside (the quarantine), with this outcome in its record; not a lease loss
    QUARANTINED = "quarantined"


@dataclass(frozen=True)
class TaskRef:
    """A registered task by name with JSON arguments: the only job form a shared store holds."""

    name: str
    args_json: str = "{}"


Target = Callable[[], Any] | TaskRef


class TraceContext(NamedTuple):
    """The W3C trace context of the enqueue that created a job (``traceparent``, and
    ``tracestate`` or ""): where its invocations' spans join the producer's trace
    (docs/tracing.md). Provenance, not definition: it takes no part in comparing specs."""

    traceparent: str
    tracestate: str = ""

    @property
    def trace_id(self) -> str:
        """The 32 hex digits of the trace id ("" if ``traceparent`` is not W3C's form)."""
        parts = self.traceparent.split("-")
        return parts[1] if len(parts) >= 4 and len(parts[1]) == 32 else ""


@dataclass(frozen=True)
class After:
    """Once, ``delay`` seconds after the store accepts the job."""

    delay: float

    def describe(self) -> str:
        return f"once after {self.delay:g}s"


@dataclass(frozen=True)
class At:
    """Once, at an absolute wall-clock time (epoch seconds)."""

    wall: float

    def describe(self) -> str:
        return f"once at {timeinput.iso_utc(self.wall)}"


@dataclass(frozen=True)
class Every:
    """Fixed rate: occurrence k is due at anchor + k * interval. ``anchor`` is epoch
    seconds; ``None`` means the moment the store accepts the job."""

    interval: float
    anchor: float | None = None

    def describe(self) -> str:
        a = "" if self.anchor is None else f" from {timeinput.iso_utc(self.anchor)}"
        return f"every {self.interval:g}s{a}"


class Ambiguous(str, enum.Enum):
    """A local time that occurs twice (clocks go back): which of the two instants run."""

    FIRST = "first"  # the earlier instant (the offset before the change)
    LAST = "last"  # the later instant (the offset after the change)
    BOTH = "both"  # both: two invocations, with two different scheduled instants


class Missing(str, enum.Enum):
    """A local time that does not exist (clocks go forward): what runs instead."""

    SHIFT = "shift"  # the first instant after the gap (the moment the clocks changed)
    SKIP = "skip"  # nothing; the occurrence is not part of the schedule


@dataclass(frozen=True)
class Cron:
    """A calendar schedule: a cron expression (5 fields, or 6 with seconds first) read in
    the IANA time zone ``tz``. Local times that occur twice or not at all on a
    daylight-saving change follow ``ambiguous`` and ``missing``. ``jitter`` (seconds)
    delays every occurrence by a fixed, job-id-seeded fraction of it, never past the next
    occurrence."""

    expr: str
    tz: str = "UTC"
    ambiguous: Ambiguous = Ambiguous.FIRST
    missing: Missing = Missing.SHIFT
    jitter: float = 0.0

    def describe(self) -> str:
        j = f" ±jitter {self.jitter:g}s" if self.jitter else ""
        return f"cron '{self.expr}' {self.tz}{j}"


Schedule = After | At | Every | Cron


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter. ``max_attempts=1`` means no retry."""

    max_attempts: int = 1
    backoff: float = 1.0
    factor: float = 2.0
    max_backoff: float = 300.0
    jitter: float = 0.1  # +/- fraction of the delay
    max_stalls: int = 3  # owners that may lose their lease on one invocation before it is
    # dead-lettered as poison (at-least-once delivery only)

    def __post_init__(self) -> None:
        for name in ("max_attempts", "max_stalls"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"RetryPolicy.{name} must be an int >= 1, got {v!r}")
        for name in ("backoff", "factor", "max_backoff", "jitter"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
                raise ValueError(f"RetryPolicy.{name} must be a finite number >= 0, got {v!r}")
        if self.jitter > 1:
            raise ValueError(f"RetryPolicy.jitter is a fraction in [0, 1], got {self.jitter!r}")
        for name in ("backoff", "max_backoff"):  # as every other duration (validation.py)
            if getattr(self, name) > 1e11:
                raise ValueError(
                    f"RetryPolicy.{name} must be at most 1e11 s (about 3,170 years), "
                    f"got {getattr(self, name)!r}"
                )


DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True)
class JobSpec:
    """A job's whole definition. Two specs that compare equal are the same definition
    (an upsert of an equal spec is a no-op that keeps the anchor)."""

    job_id: str
    target: Target
    schedule: Schedule
    lane: str = "default"
    timeout: float | None = None
    retry: RetryPolicy = DEFAULT_RETRY
    misfire: Misfire = Misfire.SKIP
    misfire_grace: float | None = None  # None: min(interval, 60 s)
    catch_up_window: float | None = None  # catch_up: older occurrences are skipped (None: all run)
    overlap: Overlap = Overlap.SKIP
    delivery: Delivery = Delivery.AT_LEAST_ONCE
    # the enqueue's trace context (tracing on, a span current: scheduler/tracing.py); not
    # compared: an upsert of an equal definition from another trace is still unchanged
    trace: TraceContext | None = field(default=None, compare=False)
    # flow control (docs/flow-control.md): among due jobs of a lane a higher priority
    # starts first; jobs of one limit key share its limits and take turns with other keys
    priority: int = 0
    limit_key: str | None = None
    # seconds a run's result is kept after it ends (docs/results.md); None: a day, and a
    # recurring job's runs only when a handle waited for them
    result_ttl: float | None = None

    @property
    def recurring(self) -> bool:
        return isinstance(self.schedule, (Every, Cron))


class Claim(NamedTuple):
    """One invocation handed to one owner under a lease. ``token`` authorises every later
    write about it; ``fence`` grows with every claim so side effects can reject a stale
    owner."""

    job_id: str
    scheduled: float
    attempt: int
    token: str
    fence: int
    lease_until: float | None
    spec: JobSpec
    generation: int
    lane: str
    # when it became claimable (store clock): the later of its due time and the moment it
    # was enqueued, retried or resumed; dispatch lag counts from here (None: ``scheduled``)
    ready: float | None = None
    # a claim its key's rate limit counted: it starts within this many seconds of the
    # moment its replica asked for it, or is handed back unstarted (docs/flow-control.md#limits)
    start_within: float | None = None
    # the occurrences of its job skipped since the job's previous claim, summed (``Skip``
    # ``then``); None: none. A traced run tells them as a span event (docs/tracing.md)
    skipped: Skip | None = None

    @property
    def scheduled_ms(self) -> int:
        return round(self.scheduled * 1000)

    @property
    def invocation_id(self) -> str:
        return f"{self.job_id}@{self.scheduled_ms}"


@dataclass(frozen=True)
class ClaimBatch:
    """What one ``claim_due`` call returns: the claims, and how long until the next
    pending invocation of a lane that still has capacity (``None``: nothing pending)."""

    claims: list[Claim]
    next_due_in: float | None
    now: float | None = None  # the store's time at the claim (for dispatch-lag figures)
    # the time, on the clock the store shares with its engine, that next_due_in counts
    # from, when the store read it there (in process; a test clock): exact even if that
    # clock moved during the call; None: from the reply's arrival (Redis's own clock)
    since: float | None = None


@dataclass(frozen=True)
class AddResult:
    """``created``, ``replaced`` (a changed definition) or ``unchanged`` (same one: no-op),
    and how long until the job's first pending invocation."""

    outcome: str
    due_in: float | None


EVENT_KINDS = (  # every kind of event a store records (tests/unit/test_architecture.py)
    "abandoned",
    "backfilled",
    "cancelled",
    "claimed",
    "data_loss",
    "dead_lettered",
    "deleted",
    "failed",
    "failover",
    "interrupted",
    "lease_lost",
    "operator",
    "paused",
    "plan_failed",
    "purged",
    "quarantined",
    "released",
    "requeued",
    "restored",
    "resumed",
    "retried",
    "retried_by_operator",
    "scheduled",
    "skipped",
    "succeeded",
    "triggered",
)


class Event(NamedTuple):
    """One state change, as kept in the store's bounded event log."""

    at: float
    kind: str  # scheduled claimed succeeded failed retried skipped cancelled lease_lost ...
    job_id: str
    scheduled: float | None = None
    attempt: int | None = None
    detail: str = ""
    # a claim: when the job became claimable, if later than ``scheduled`` (enqueued with a
    # past due time, retried, resumed); dispatch lag counts from here
    ready: float | None = None


@dataclass(frozen=True)
class Skip:
    """Occurrences of a recurring job that did not run, and why."""

    first: float
    last: float
    count: int
    reason: str  # misfire | coalesced | catch-up-window | overlap | overlap-queue-full

    def then(self, later: Skip) -> Skip:
        """These skips and ``later``'s as one summary: the range over both, the counts
        summed, each reason once (comma-separated, in the order first recorded), as
        lua/include/skips.lua sums them (``unreported_with``)."""
        same = later.reason in self.reason.split(",")
        reason = self.reason if same else f"{self.reason},{later.reason}"
        first, last = min(self.first, later.first), max(self.last, later.last)
        return Skip(first, last, self.count + later.count, reason)


@dataclass(frozen=True)
class InvocationInfo:
    job_id: str
    scheduled: float
    attempt: int
    fence: int
    lease_until: float | None


@dataclass(frozen=True)
class JobInfo:
    """A snapshot of one job for inspection.

    ``next_run`` is on the store's clock: epoch seconds in a shared (Redis) store; in
    process, the engine's clock, ``time.monotonic()`` seconds unless a clock was given.
    In process, ``next_run - engine.clock.now()`` is how far away it is, and
    ``time.time() + next_run - time.monotonic()`` its wall time."""

    job_id: str
    schedule: str
    lane: str
    state: str  # scheduled | paused | running | succeeded | failed | cancelled | abandoned |
    #             malformed (a shared store's job hash that does not parse: run duetime doctor)
    next_run: float | None
    runs: int  # runs that succeeded
    failures: int  # runs that failed for good (after their retries): dead letters
    attempts: int  # the attempt number of the job's last invocation (1: first try)
    last_result: Any
    last_error: str | None
    running: tuple[InvocationInfo, ...]
    skipped: tuple[Skip, ...]
    dead_letters: tuple[Event, ...]
    task: str = ""  # the registered task's name, or a callable's module.qualname
    args: str = "{}"  # a registered task's keyword arguments, as JSON text
    last_traceback: str | None = None  # the last error's traceback (its last 8 KiB)
    trace_id: str = ""  # the trace id of the enqueue that created it ("": none recorded)
    priority: int = 0  # flow control (docs/flow-control.md)
    limit_key: str | None = None
    progress: Progress | None = None  # what a run last reported (docs/results.md)
    result_ttl: float | None = None  # seconds its results are kept (None: the default)


class Progress(NamedTuple):
    """What an invocation last reported with ``current_invocation().progress(value)``:
    which invocation (its scheduled instant, ms on the store's clock), when (epoch
    seconds) and the value (JSON)."""

    scheduled_ms: int
    at: float
    value: Any


@dataclass(frozen=True)
class Outcome:
    """How one invocation ended, as a handle reads it (``scheduler/handles.py``)."""

    job_id: str
    scheduled_ms: int | None  # the invocation; None: the job as a whole (cancelled)
    # succeeded | failed | timed_out | interrupted | abandoned | cancelled
    state: str
    value: Any = None  # succeeded: the job's return value, as JSON decodes it
    error: str = ""  # otherwise: the error's text, "Type: message" ("" if none)

    @staticmethod
    def ended(job_id: str, scheduled_ms: int | None, state: str, detail: str = "") -> Outcome:
        """A failure's outcome from the error text a store keeps (a timeout's is its own
        state, ``timed_out``)."""
        if state == "failed" and detail.startswith("InvocationTimeout: "):
            state = "timed_out"
        return Outcome(job_id, scheduled_ms, state, None, detail)


def describe_target(target: Target) -> tuple[str, str]:
    """(task, arguments as JSON) of a job's target, for inspection."""
    if isinstance(target, TaskRef):
        return target.name, target.args_json
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{getattr(target, '__module__', None) or '?'}.{name}", "{}"


@dataclass(frozen=True)
class Finding:
    """One thing the reconciler found about a job, and what it did about it."""

    job_id: str
    problem: str  # e.g. "orphan: no due entry, nothing running"
    action: str  # requeued abandoned recounted rescored reported, moved aside, none (dry run)


@dataclass(frozen=True)
class Reconciled:
    """What one reconciler pass (or a full ``duetime doctor`` scan) saw and did."""

    scanned: int  # job keys looked at
    findings: tuple[Finding, ...]
    leases_dropped: int  # lease entries that no RUNNING entry backed
    complete: bool  # the scan reached the end of the keyspace
    # A full scan of the shared store (duetime doctor) also compares the live jobs it found
    # with the count the scripts keep (stats `live`): None when the namespace (or a shard
    # of it: `uncounted`) has no count; `lost`: at least that many live jobs the scripts
    # counted are gone (exact when nothing changed during the scan: `churn`, the state
    # changes recorded meanwhile, is 0); `started`: shards whose count this scan started.
    live_counted: int | None = None
    live_found: int = 0
    lost: int | None = None
    churn: int = 0
    uncounted: int = 0
    started: int = 0


@dataclass(frozen=True)
class Quarantined:
    """Data moved aside because it did not parse (docs/operating.md, the quarantine):
    kept, with the reason, until an operator restores or purges it."""

    entry_id: str  # the job id when known
    job_id: str  # "" if the data named no job
    reason: str
    at: float | None  # epoch seconds
    found_by: str  # the script that moved it: claim, reap, complete, ...
    member: str  # the due entry moved with it ("" if none)
    lane: str
    due: float | None  # that entry's due time, epoch seconds
    key_type: str  # the job key's type when it was moved ("none": there was no key)
    legacy: bool = False  # an entry of the list older versions wrote (a bare due member)


RETRY_REFUSALS = {
    "unknown": "there is no such job (finished jobs are kept for their result_ttl, a day "
    "by default)",
    "running": "an invocation of it is running; retry once it ended",
    "not_failed": "it has no dead letter to retry (it did not fail, or it was cancelled)",
}


@dataclass(frozen=True)
class Retried:
    """What an operator's ``retry`` did to one job: ``queued`` invocations (0: refused,
    ``refused`` is the code: unknown, running, not_failed; ``RETRY_REFUSALS`` says why)."""

    job_id: str
    queued: int
    refused: str = ""

    def count(self) -> int:
        """How many invocations were queued; ``JobNotFoundError`` for an unknown job,
        ``ValueError`` saying why for a refusal (``Client.retry``)."""
        if self.refused == "unknown":
            raise JobNotFoundError(self.job_id)
        if self.refused:
            why = RETRY_REFUSALS[self.refused]
            raise ValueError(f"job {self.job_id!r} cannot be retried: {why}")
        return self.queued
