"""What the runner asks of a tracer (``Scheduler(tracing=True)``; scheduler/spans.py is the
OpenTelemetry one), and how an invocation's end is named for it.

The runner holds no tracer when tracing is off: every hook below is behind one ``is None``
test, so an engine without tracing pays nothing else (docs/tracing.md, the cost).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

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
