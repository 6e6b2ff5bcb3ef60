"""Tracing a process lane's invocations (docs/tracing.md, docs/lanes.md): the replica
sends the invocation span's W3C context with the job, and the worker process makes it
current around the task, so the spans the job creates there are the invocation's
children, as in a thread lane; a context that does not parse, or no OpenTelemetry API in
the child, never fails the job; with tracing off nothing is sent.

The replica's spans go to the SDK's ``InMemorySpanExporter`` (tests/unit/test_tracing.py's
provider); the job's span goes to the child's own in-memory exporter, and the job returns
what it received as its JSON result (tests/unit/traced_jobs.py). Real worker processes,
on the fake clock; ``wait_idle`` returns once the outcome, and so the run's span, is
recorded."""

from __future__ import annotations

import logging
import sys

import pytest
from opentelemetry import context, trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from scheduler import Lane
from tests.helpers import WAIT
from tests.unit import traced_jobs  # noqa: F401 - registers the traced.* tasks
from tests.unit.test_tracing import EXPORTER, PARENT, _provider, named
from workers import traced


@pytest.fixture
def spans() -> InMemorySpanExporter:
    _provider()
    EXPORTER.clear()
    return EXPORTER


def _engine(make_engine, *, tracing: bool):
    return make_engine(1, lanes={"p": Lane(1, isolation="process")}, tracing=tracing)


@pytest.mark.parametrize("name", ["traced.sync", "traced.async"])
def test_a_jobs_spans_in_its_worker_process_are_children_of_its_run(spans, make_engine, name):
    engine = _engine(make_engine, tracing=True)
    with trace.get_tracer("app").start_as_current_span("request") as request:
        job = engine.after(name, 0, lane="p")
    assert engine.wait_idle(WAIT * 4)
    info = engine.get(job)
    assert info.state == "succeeded", info.last_error
    [run] = named(spans, "duetime run")
    assert run.attributes["duetime.invocation.lane"] == "p"
    assert run.attributes["duetime.invocation.outcome"] == "succeeded"
    inside = info.last_result  # the job's own span, as the child's exporter got it
    assert inside["name"].startswith("job work")
    # request -> enqueue -> run (the replica) -> the job's span (the worker process)
    assert run.context.trace_id == request.get_span_context().trace_id
    assert inside["trace_id"] == f"{run.context.trace_id:032x}"
    assert inside["parent_id"] == f"{run.context.span_id:016x}"
    assert inside["parent_remote"] is True


def test_tracing_off_sends_nothing(spans, make_engine, monkeypatch):
    monkeypatch.setattr(traced, "carrier", lambda: pytest.fail("asked for a context"))
    engine = _engine(make_engine, tracing=False)
    job = engine.after("traced.current", 0, lane="p")
    assert engine.wait_idle(WAIT * 4)
    info = engine.get(job)
    assert (info.state, info.last_result) == ("succeeded", False)  # no span current there
    assert named(spans, "duetime") == []


def test_a_malformed_context_is_ignored_and_the_job_runs(spans, make_engine, monkeypatch):
    monkeypatch.setattr(traced, "carrier", lambda: {"traceparent": "garbage"})
    engine = _engine(make_engine, tracing=True)
    job = engine.after("traced.current", 0, lane="p")
    assert engine.wait_idle(WAIT * 4)
    info = engine.get(job)
    assert (info.state, info.last_result) == ("succeeded", False), info.last_error
    [run] = named(spans, "duetime run")
    assert run.attributes["duetime.invocation.outcome"] == "succeeded"


# ---- the two halves, in this process ------------------------------------------------------


def test_the_carrier_is_the_recording_span_current_here(spans):
    assert traced.carrier() is None  # nothing current
    with trace.get_tracer("t").start_as_current_span("run") as span:
        headers = traced.carrier()
    sc = span.get_span_context()
    flags = int(sc.trace_flags)
    assert headers == {"traceparent": f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{flags:02x}"}
    dropped = trace.NonRecordingSpan(sc)  # a run the sampler dropped: nothing is sent
    with trace.use_span(dropped):
        assert traced.carrier() is None


@pytest.mark.parametrize(
    "headers",
    [{"traceparent": "garbage"}, {"traceparent": 7}, {}, PARENT, None, ["traceparent"]],
    ids=["garbage", "not-text", "empty", "a-bare-string", "none", "a-list"],
)
def test_a_malformed_context_attaches_nothing_and_says_why(headers, caplog):
    caplog.set_level(logging.DEBUG, logger="duetime.tracing")
    before = context.get_current()
    assert traced.attach(headers, "j1") is None
    assert context.get_current() == before
    assert "job j1: trace context" in caplog.text and "ignored" in caplog.text


def test_a_valid_context_is_current_until_detached():
    token = traced.attach({"traceparent": PARENT, "tracestate": "k=v"}, "j1")
    assert token is not None
    try:
        sc = trace.get_current_span().get_span_context()
        assert f"{sc.trace_id:032x}" == PARENT.split("-")[1] and sc.is_remote
        assert sc.trace_state.get("k") == "v"
    finally:
        traced.detach(token)
    assert not trace.get_current_span().get_span_context().is_valid


def test_without_the_api_in_the_worker_process_the_job_runs_untraced(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="duetime.tracing")
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    assert traced.attach({"traceparent": PARENT}, "j1") is None
    assert "no OpenTelemetry API in its worker process" in caplog.text
