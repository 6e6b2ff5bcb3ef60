"""OpenTelemetry, the replica's side: each invocation a CONSUMER span (tracing on).

Guarantees (docs/tracing.md):
  - a one-off job's attempts are children of the enqueue's span (the producer's trace
    holds the whole story: enqueue, attempt 1, attempt 2...); a recurring job's runs are
    each the root of a trace of its own, with a *link* to the enqueue (one trace for
    years of runs would be unreadable and never end);
  - the span is current while the job runs (the job's own spans are its children), and
    ends once the outcome is recorded: succeeded, failed, timed_out, interrupted,
    lease_lost or quarantined (``duetime.invocation.outcome``), the error recorded on
    failure; what was asked of the job meanwhile (a lost lease found at renewal, a
    timeout, an interrupt, a quarantine) is a span event, and so are the occurrences of
    its job the store skipped since the job's previous claim (misfire, overlap: the
    claim carries them, ``Claim.skipped``);
  - with no SDK provider (the API's no-op) nothing else is computed: the span reports
    it does not record, and no attribute is built.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from scheduler import tracing
from scheduler.clock import Clock
from scheduler.model import Claim, Commit, Cron, Skip, TraceContext, describe_target
from scheduler.stores.base import Store

log = logging.getLogger("duetime.tracing")

# what a cancel token's reason means, as a span event (workers/context.py names them)
CANCEL_EVENTS = {
    "lease lost": "duetime.lease_lost",
    "timeout": "duetime.timeout",
    "cancelled": "duetime.interrupted",
    "quarantined": "duetime.quarantined",
}
# a refused commit's answer as the invocation's outcome
REFUSED = {Commit.LEASE_LOST: "lease_lost", Commit.QUARANTINED: "quarantined"}


class CancelToken(Protocol):
    """What a span hears of its job's cancel token (workers/context.py's)."""

    reason: str | None

    def on_cancel(self, callback: Callable[[], None]) -> None: ...


class InvocationSpan:
    """One invocation's span, from its start to its recorded outcome. It hears its job's
    cancel token until the job returns, and then lets go of it (no reference cycle
    between them is left for the garbage collector: docs/tracing.md, the cost)."""

    __slots__ = ("_span", "_token", "_outcome", "_api", "_context", "_cancel", "_returned", "_lost")

    def __init__(
        self, span: Any, token: object, api: Any, context: Any, cancel: CancelToken | None
    ) -> None:
        self._span, self._token, self._api, self._context = span, token, api, context
        self._cancel = cancel  # the job's cancel token (None once the job returned)
        self._outcome = "succeeded"
        self._returned = self._lost = False

    def __call__(self) -> None:
        """The job's cancel token was cancelled (its callback): a span event while the job
        runs; once it returned, a loss is the commit's to tell (``end``)."""
        cancel = self._cancel
        if cancel is not None:
            self.cancelled(cancel.reason or "")

    def cancelled(self, reason: str) -> None:
        """The job was asked to stop (its cancel token's ``reason``) while it ran."""
        if self._returned:
            return
        attributes = {"duetime.cancel.reason": reason}
        if reason == "lease lost":
            self._lost = True
            attributes["duetime.lease.found"] = "at renewal"
        self._span.add_event(CANCEL_EVENTS.get(reason, "duetime.cancel"), attributes)

    def finished(self, outcome: str, error: BaseException | None) -> None:
        """The job's call returned as ``outcome`` (succeeded, failed, timed_out,
        interrupted): the span is no longer current on this thread."""
        self._context.detach(self._token)
        self._outcome, self._returned, self._cancel = outcome, True, None
        if error is not None and outcome != "interrupted":
            self._span.record_exception(error)
            self._span.set_attribute("error.type", type(error).__qualname__)

    def end(self, result: Commit | None) -> None:
        """The store answered the outcome's write (None: given up; it runs again)."""
        outcome = REFUSED.get(result, self._outcome) if result is not None else self._outcome
        span = self._span
        if result is Commit.LEASE_LOST and not self._lost:
            span.add_event("duetime.lease_lost", {"duetime.lease.found": "at commit"})
        if result is Commit.OK:
            span.set_attribute("duetime.invocation.outcome", outcome)
        else:  # not recorded as it says: refused, or given up
            span.set_attributes(
                {"duetime.invocation.outcome": outcome, "duetime.invocation.recorded": False}
            )
        if outcome != "succeeded" and outcome != "interrupted":
            status = self._api.Status(self._api.StatusCode.ERROR, outcome)
            span.set_status(status)
        span.end()


class InvocationTracer:
    """Starts the span of each invocation an engine runs. ``owner``: the replica's id;
    ``store_now``: the time on the scale of the store's due times (epoch seconds for a
    shared store: the replica's clock, so the lag includes its skew from Redis)."""

    def __init__(self, owner: str, store_now: Callable[[], float]) -> None:
        api = tracing.api()
        assert api is not None  # the engine asked ``tracing.wanted`` first
        self._api = api
        self._owner = owner
        self._store_now = store_now
        from opentelemetry import context

        self._context = context
        self._no_sdk = (api.ProxyTracerProvider, api.NoOpTracerProvider)
        self._sdk: Any = None  # the provider's tracer, once one is set (set once: cached)
        self._consumer = api.SpanKind.CONSUMER
        self._root = context.Context()  # an empty context: a span started in it is a root

    def _recording(self) -> Any:
        """The SDK's tracer, or None while the global provider is the API's no-op. The
        API lets a process set its provider once, so the first real one is kept."""
        provider = self._api.get_tracer_provider()
        if isinstance(provider, self._no_sdk):
            return None
        self._sdk = provider.get_tracer(tracing.INSTRUMENTATION)
        return self._sdk

    def start(self, claim: Claim, cancel: CancelToken | None = None) -> InvocationSpan | None:
        """The span of ``claim``'s invocation, started and made current on this thread,
        hearing ``cancel`` (the job's token) until the job returns; None if it does not
        record (no SDK: nothing else is done)."""
        tracer = self._sdk or self._recording()
        if tracer is None:
            return None  # the API's no-op: no span would record; nothing to compute
        spec, api = claim.spec, self._api
        parent, links = self._root, None  # a root unless the enqueue's context says else
        if spec.trace is not None:
            joined = self._joined(spec.trace, spec.recurring)
            if joined is None:
                tracing.span_context(spec.trace, claim.job_id)  # says why, at DEBUG
            else:
                parent, links = joined
        task = describe_target(spec.target)[0]
        span = tracer.start_span(f"duetime run {task}", parent, self._consumer, links=links)
        if not span.is_recording():
            return None
        span.set_attributes(self._attributes(claim, task))
        if claim.skipped is not None:  # what the store skipped of its job since its last claim
            span.add_event("duetime.skipped", skipped_attributes(claim.skipped))
        context = self._context
        token = context.attach(api.set_span_in_context(span))
        handle = InvocationSpan(span, token, api, context, cancel)
        if cancel is not None:
            cancel.on_cancel(handle)
        return handle

    @functools.lru_cache(maxsize=1024)  # noqa: B019 (one per engine, as long-lived)
    def _joined(self, trace: TraceContext, recurring: bool) -> tuple[Any, Any] | None:
        """The parent context and links of a run of a job enqueued at ``trace``: a
        recurring job's run is a root with a link, a one-off's a child; None if ``trace``
        is no valid W3C context."""
        api, sc = self._api, tracing.span_context(trace, "")
        if sc is None:
            return None
        if recurring:
            return self._root, [api.Link(sc)]  # its one link: no label (~2 µs a run)
        return api.set_span_in_context(api.NonRecordingSpan(sc), self._root), None

    def lost_before_start(self, claim: Claim) -> None:
        """A claim whose lease was gone before its job could start: a span of its own."""
        handle = self.start(claim)
        if handle is not None:  # (no job: no cancel token)
            handle.finished("lease_lost", None)
            handle.end(Commit.LEASE_LOST)

    def _attributes(self, claim: Claim, task: str) -> dict[str, Any]:
        started = self._store_now()
        scheduled = claim.scheduled
        out: dict[str, Any] = {
            "duetime.job.id": claim.job_id,
            "duetime.job.task": task,
            "duetime.invocation.scheduled_ms": claim.scheduled_ms,
            "duetime.invocation.lag_s": round(started - scheduled, 6),
            "duetime.invocation.attempt": claim.attempt,
            "duetime.invocation.fence": claim.fence,
            "duetime.invocation.lane": claim.lane,
            "duetime.replica.id": self._owner,
        }
        if claim.ready is not None and claim.ready > scheduled:
            out["duetime.invocation.ready_ms"] = round(claim.ready * 1000)
        schedule = claim.spec.schedule
        if isinstance(schedule, Cron):
            out.update(dst_attributes(schedule, scheduled))
        return out


def tracer_for(on: bool, owner: str, clock: Clock, store: Store) -> InvocationTracer | None:
    """An engine's tracer when ``on`` (``tracing.wanted``), else None. The in-process
    store's due times are on the engine's clock; a shared store's are epoch seconds."""
    if not on:
        return None
    from scheduler.stores.memory import MemoryStore

    return InvocationTracer(owner, clock.now if isinstance(store, MemoryStore) else clock.wall)


def skipped_attributes(skipped: Skip) -> dict[str, Any]:
    """The ``duetime.skipped`` event's attributes: the occurrences of the run's job that
    the store skipped since the job's previous claim (ms on the store's clock, as
    ``duetime.invocation.scheduled_ms``), how many, and why."""
    return {
        "duetime.skipped.count": skipped.count,
        "duetime.skipped.first_ms": round(skipped.first * 1000),
        "duetime.skipped.last_ms": round(skipped.last * 1000),
        "duetime.skipped.reason": skipped.reason,
    }


def dst_attributes(cron: Cron, t: float) -> dict[str, str]:
    """A cron occurrence's wall time in its zone, and the daylight-saving choice that
    picked it when that wall time occurs twice (clocks go back): ``ambiguous`` policy,
    and which of the two instants this one is. (An occurrence a ``missing`` policy moved
    out of a gap is not told apart here: docs/tracing.md.)"""
    try:
        zone = ZoneInfo(cron.tz)
        local = dt.datetime.fromtimestamp(t, zone)
    except (ValueError, OverflowError, OSError, KeyError) as exc:
        log.debug("occurrence %r in %s not shown (%s)", t, cron.tz, exc)
        return {}
    out = {"duetime.cron.local": local.isoformat(timespec="seconds")}
    wall = local.replace(tzinfo=None)
    if (
        wall.replace(tzinfo=zone, fold=0).utcoffset()
        != wall.replace(tzinfo=zone, fold=1).utcoffset()
    ):
        which = "later" if local.fold else "earlier"
        out["duetime.cron.dst"] = f"ambiguous={cron.ambiguous.value}: the {which} {wall:%H:%M}"
    return out
