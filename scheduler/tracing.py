"""OpenTelemetry, the producer's side: turning tracing on, and the enqueue's trace context
stored with the job (the ``otel`` extra: ``pip install -e '.[otel]'`` from a checkout;
once published, ``duetime[otel]``).

Guarantees (docs/tracing.md):
  - off unless asked: ``tracing=True`` (``Client``, ``AsyncClient``, ``Scheduler``), or
    ``DUETIME_TRACING=1`` when ``tracing`` is left at None; ``duetime run --tracing``;
  - no cost when off: ``opentelemetry`` is imported only when tracing is turned on (once
    per process), and a call site that is off never reaches this module;
  - at an enqueue with tracing on and a valid span current, the job's definition carries
    the W3C ``traceparent`` (and ``tracestate``) of a PRODUCER span, child of that span,
    that covers the store's write (or of the current span itself when no SDK records);
    without a current span the job carries none;
  - a trace context in job data that does not parse is ignored (a DEBUG line): it never
    fails an enqueue, a claim or a job.

Not here: the invocations' spans (``scheduler/spans.py``, started by the runner).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from scheduler.model import JobSpec, TraceContext, describe_target

log = logging.getLogger("duetime.tracing")

ENV = "DUETIME_TRACING"  # "1" (or true/yes/on) turns tracing on where ``tracing`` is None
INSTRUMENTATION = "duetime"  # the tracer's name (instrumentation scope)

_api: ModuleType | None = None
_looked = False


def api() -> ModuleType | None:
    """``opentelemetry.trace``, imported once; None if the extra is not installed."""
    global _api, _looked
    if not _looked:
        try:
            from opentelemetry import trace
        except ImportError:
            trace = None  # type: ignore[assignment]
        _api, _looked = trace, True
    return _api


def wanted(flag: bool | None) -> bool:
    """Whether tracing is on: ``flag`` as given, or with None the environment
    (``DUETIME_TRACING``). On without the extra: ``tracing=True`` raises ImportError
    saying what to install; the environment alone logs a warning and stays off."""
    on = flag
    if on is None:
        on = os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")
    if not on:
        return False
    if api() is None:
        msg = (
            "tracing needs the OpenTelemetry API (opentelemetry-api>=1.25): pip install -e "
            "'.[otel]' from a checkout (once published: duetime[otel])"
        )
        if flag:
            raise ImportError(f"tracing=True: {msg}")
        log.warning("%s=%s: %s; tracing stays off", ENV, os.environ.get(ENV), msg)
        return False
    return True


def tracer() -> Any:
    """duetime's tracer (the API's proxy: it follows the global provider, even one set
    after this call; without a provider every span is a no-op)."""
    trace = api()
    assert trace is not None  # only asked once ``wanted`` said yes
    return trace.get_tracer(INSTRUMENTATION)


def of_span_context(sc: Any) -> TraceContext:
    """A span context as W3C headers."""
    parent = f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"
    state = sc.trace_state.to_header() if sc.trace_state else ""
    return TraceContext(parent, state)


def span_context(trace: TraceContext, job_id: str) -> Any:
    """The remote span context ``trace`` stands for, or None (with a DEBUG line) if it is
    not a valid W3C trace context: another program's data, or a hand edit."""
    sc, why = _parsed(trace)
    if sc is None:
        log.debug("job %s: trace context %r ignored (%s)", job_id, trace, why)
    return sc


@functools.lru_cache(maxsize=4096)  # a recurring job's runs, a burst's jobs: parsed once
def _parsed(trace: TraceContext) -> tuple[Any, str]:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {"traceparent": trace.traceparent}
    if trace.tracestate:
        carrier["tracestate"] = trace.tracestate
    try:
        ctx = TraceContextTextMapPropagator().extract(carrier)
        sc = api().get_current_span(ctx).get_span_context()  # type: ignore[union-attr]
    except Exception as exc:  # the propagator is lenient; a foreign one may not be
        return None, str(exc)
    return (sc, "") if sc.is_valid else (None, "not valid W3C")


@contextmanager
def enqueuing(specs: Sequence[JobSpec], call: str) -> Iterator[None]:
    """Around a store's write of ``specs`` (tracing on): with a valid span current, a
    PRODUCER span ``duetime <call> <task>`` is started as its child and every spec is
    stamped with its trace context (the current span's own when no SDK records); the
    span ends with the write, in error if the write raised. No current span: nothing."""
    trace = api()
    assert trace is not None
    current = trace.get_current_span().get_span_context()
    if not current.is_valid or not specs:
        yield
        return
    task = describe_target(specs[0].target)[0]
    span = tracer().start_span(f"duetime {call} {task}", kind=trace.SpanKind.PRODUCER)
    recording = span.is_recording()
    stamp = of_span_context(span.get_span_context() if recording else current)
    for spec in specs:  # freshly built by this enqueue: stamped in place
        object.__setattr__(spec, "trace", stamp)
    if recording:
        span.set_attributes(
            {
                "duetime.job.id": specs[0].job_id,
                "duetime.job.task": task,
                "duetime.job.schedule": specs[0].schedule.describe(),
                "duetime.enqueue.count": len(specs),
            }
        )
    try:
        yield
    except BaseException as exc:
        if recording:
            span.record_exception(exc)
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)[:200]))
        raise
    finally:
        span.end()


def trace_id(spec: JobSpec | None) -> str:
    """The trace id of the enqueue that created the job ("" if none was recorded)."""
    return "" if spec is None or spec.trace is None else spec.trace.trace_id
