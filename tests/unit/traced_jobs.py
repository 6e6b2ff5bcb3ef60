"""Tasks that tests/unit/test_process_tracing.py runs in a process lane's worker processes
(a module the children import). Each creates a span of its own in the child, through that
process's SDK (set here, in the child only, as a task module may: docs/tracing.md), and
returns what the child's in-memory exporter received: the test reads it in the job's
JSON result."""

from __future__ import annotations

import asyncio
import multiprocessing
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from scheduler import task

CHILD_SPANS = InMemorySpanExporter()


def _tracer() -> Any:
    """The worker process's SDK, set by its first traced job (never in the test's own
    process: its provider is tests/unit/test_tracing.py's)."""
    assert multiprocessing.parent_process() is not None, "a worker process's task"
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(CHILD_SPANS))
        trace.set_tracer_provider(provider)
    CHILD_SPANS.clear()
    return trace.get_tracer("job")


def _exported() -> dict[str, Any]:
    """The job's one span, as the child's exporter has it (ids in hex)."""
    [span] = CHILD_SPANS.get_finished_spans()
    parent = span.parent
    return {
        "name": span.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "parent_id": None if parent is None else f"{parent.span_id:016x}",
        "parent_remote": None if parent is None else parent.is_remote,
    }


@task("traced.sync")
def traced_sync() -> dict[str, Any]:
    with _tracer().start_as_current_span("job work (sync)"):
        pass
    return _exported()


@task("traced.async")
async def traced_async() -> dict[str, Any]:
    tracer = _tracer()
    await asyncio.sleep(0)  # the context crosses the loop's steps
    with tracer.start_as_current_span("job work (async)"):
        await asyncio.sleep(0)
    return _exported()


@task("traced.current")
def traced_current() -> bool:
    """Whether a valid span context is current in the job (its invocation's, if sent)."""
    return bool(trace.get_current_span().get_span_context().is_valid)
