"""What the runner asks of a tracer (``Scheduler(tracing=True)``; scheduler/spans.py is the
OpenTelemetry one), and how an invocation's end is named for it; and a process lane's
invocation span carried to its worker process (``carrier``, then ``attach``/``detach``
there), so the job's own spans are its children as in a thread lane (docs/tracing.md,
docs/lanes.md).

The runner holds no tracer when tracing is off: every hook below is behind one ``is None``
test, so an engine without tracing pays nothing else (docs/tracing.md, the cost); a
process lane's slot asks for a ``carrier`` only when its engine traces, and a worker
process imports ``opentelemetry`` only for a job that carries one.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from scheduler.errors import InvocationCancelled, InvocationTimeout
from scheduler.model import Claim, Commit
from workers.context import INTERRUPTED, CancelToken

log = logging.getLogger("duetime.tracing")


class InvocationSpan(Protocol):
    def cancelled(self, reason: str) -> None:
        """The job was asked to stop, for ``reason`` (its cancel token's)."""

    def finished(self, outcome: str, error: BaseException | None) -> None:
        """The job's call returned as ``outcome`` (``outcome_of``), with ``error`` if it
        raised: the span is no longer current on this thread (its outcome is not yet
        recorded)."""

    def end(self, result: Commit | None) -> None:
        """The store answered the outcome's write (None: given up): the span ends."""


class InvocationTracer(Protocol):
    def start(self, claim: Claim, cancel: CancelToken | None = None) -> InvocationSpan | None:
        """Start ``claim``'s span, current on this thread, told of ``cancel`` (the job's
        token: ``InvocationSpan.cancelled``) until the job returns; None if it does not
        record."""

    def lost_before_start(self, claim: Claim) -> None:
        """``claim``'s lease was gone before its job could start."""


def outcome_of(error: BaseException | None, reason: str | None) -> str:
    """succeeded, timed_out, interrupted or failed: how the job's call ended (a refused
    write makes it lease_lost or quarantined at the end, ``InvocationSpan.end``)."""
    if error is None:
        return "timed_out" if reason == "timeout" else "succeeded"
    if isinstance(error, InvocationTimeout):
        return "timed_out"
    if isinstance(error, InvocationCancelled) and reason == INTERRUPTED:
        return "interrupted"
    return "failed"


class OpenSpans(dict[str, InvocationSpan]):
    """The spans of a runner's invocations by claim token, each kept from its start until
    its outcome is recorded (by the runner's commit, or by a flush of batched acks). Empty
    when tracing is off: the runner's ``if spans:`` tests (a dict's own length, no Python
    call) are all it costs then. Set and popped by any thread without a lock (single dict
    operations are atomic)."""

    def start(
        self, tracer: InvocationTracer, claim: Claim, token: CancelToken
    ) -> InvocationSpan | None:
        """``claim``'s span, started (None: not recording). Tracing never stops a job: a
        tracer that fails is logged and the job runs untraced."""
        try:
            span = tracer.start(claim, token)
        except Exception as exc:
            log.warning("tracing: no span for job %s (%s); it runs untraced", claim.job_id, exc)
            return None
        if span is not None:
            self[claim.token] = span
        return span

    def finished(
        self, span: InvocationSpan, error: BaseException | None, reason: str | None
    ) -> None:
        """The job's call returned (with ``error``, its token cancelled for ``reason``)."""
        try:
            span.finished(outcome_of(error, reason), error)
        except Exception as exc:
            log.warning("tracing: a span could not take its job's end (%s)", exc)

    def ended(self, claims: Sequence[Claim], results: Sequence[Commit] | None) -> None:
        """The outcomes of ``claims`` were recorded (``results``; None: given up)."""
        take = self.pop
        for i, claim in enumerate(claims):
            span = take(claim.token, None)
            if span is None:
                continue
            try:
                span.end(None if results is None else results[i])
            except Exception as exc:  # never the commit's or the flusher's problem
                log.warning("tracing: the span of job %s did not end (%s)", claim.job_id, exc)


# ---- a process lane's invocation span, carried to its worker process -------------------


@functools.cache
def _propagator() -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator()


def carrier() -> dict[str, str] | None:
    """The W3C headers (``traceparent``, ``tracestate``) of the span current on this
    thread, if it records: a process lane's invocation span, which the runner made
    current before it called the slot. None with no recording span (no SDK, the sampler
    dropped the run), or if the API fails (the job runs, its spans are not children)."""
    try:
        from opentelemetry import trace

        if not trace.get_current_span().is_recording():
            return None
        headers: dict[str, str] = {}
        _propagator().inject(headers)
    except Exception as exc:  # tracing never stops a job
        log.debug("tracing: the invocation's context not sent to its worker process (%s)", exc)
        return None
    return headers or None


def attach(headers: object, job_id: str) -> object | None:
    """In a worker process: make the invocation's context (``carrier``'s headers) current,
    so the spans the job creates are its children; the token for ``detach``, or None
    (with a DEBUG line) if the OpenTelemetry API is not installed here or ``headers`` is
    no valid W3C context: the job runs anyway, its spans not parented."""
    try:
        from opentelemetry import context, trace
    except ImportError:
        msg = "job %s: no OpenTelemetry API in its worker process (its spans are not its run's)"
        log.debug(msg, job_id)
        return None
    try:
        if not isinstance(headers, dict):
            raise TypeError(f"{type(headers).__name__}, not headers")
        ctx = _propagator().extract(headers)
        if not trace.get_current_span(ctx).get_span_context().is_valid:
            raise ValueError("not valid W3C")
        return context.attach(ctx)
    except Exception as exc:  # the propagator is lenient; a malformed value may not be
        log.debug("job %s: trace context %r ignored (%s)", job_id, headers, exc)
        return None


def detach(token: object) -> None:
    """In a worker process: the job returned; its invocation's context is current no more."""
    from opentelemetry import context

    try:
        context.detach(token)  # type: ignore[arg-type]
    except Exception as exc:  # the API logs its own failure; never the job's outcome
        log.debug("tracing: the invocation's context not detached (%s)", exc)
