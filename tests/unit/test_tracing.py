"""Tracing (docs/tracing.md): the enqueue's trace context travels with the job, and each
invocation is a span, child of a one-off's enqueue or linked from a recurring job's.

In process, on the fake clock, with the SDK's ``InMemorySpanExporter`` behind a
``SimpleSpanProcessor`` (a span is exported when it ends, on the thread that ends it):
``wait_idle`` returns once every outcome is recorded, and a span ends when its outcome is.
"""

from __future__ import annotations

# the SDK is in the test extra (the otel extra brings the API only)
import logging
import subprocess
import sys
import threading

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from scheduler import Client, Scheduler, current_invocation, task
from scheduler import tracing as trace_config
from scheduler.model import After, Commit, Cron, JobSpec, TaskRef, TraceContext
from scheduler.spans import InvocationTracer, dst_attributes
from scheduler.stores.redis.protocol import definitions
from scheduler.testing import FakeClock

EXPORTER = InMemorySpanExporter()
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _provider() -> None:
    """The process's one SDK provider (the API lets it be set once), exporting here."""
    current = trace.get_tracer_provider()
    if not isinstance(current, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
        current = trace.get_tracer_provider()
    assert isinstance(current, TracerProvider)
    if not getattr(current, "_duetime_test_exporter", False):
        current.add_span_processor(SimpleSpanProcessor(EXPORTER))
        current._duetime_test_exporter = True  # type: ignore[attr-defined]


@pytest.fixture
def spans() -> InMemorySpanExporter:
    _provider()
    EXPORTER.clear()
    return EXPORTER


@task("tracing.ok")
def ok() -> int:
    return 1


@task("tracing.boom")
def boom() -> None:
    raise ValueError("boom")


def named(spans: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name.startswith(prefix)]


def test_a_one_off_runs_as_a_child_of_its_enqueue_with_its_fields(spans, clock: FakeClock):
    with Scheduler(2, clock=clock, tracing=True, owner="r1") as s:
        with trace.get_tracer("app").start_as_current_span("request") as request:
            job = s.after("tracing.ok", 5)
        clock.advance(7)
        assert s.wait_idle()
        info = s.get(job)
    [enqueue] = named(spans, "duetime enqueue")
    [run] = named(spans, "duetime run")
    trace_id = request.get_span_context().trace_id
    assert info.trace_id == f"{trace_id:032x}"
    assert enqueue.kind is SpanKind.PRODUCER and enqueue.parent is not None
    assert enqueue.parent.span_id == request.get_span_context().span_id
    assert run.kind is SpanKind.CONSUMER and run.context.trace_id == trace_id
    assert run.parent is not None and run.parent.span_id == enqueue.context.span_id
    assert run.links == ()
    a = dict(run.attributes or {})
    assert a["duetime.job.id"] == job and a["duetime.job.task"] == "tracing.ok"
    assert a["duetime.invocation.scheduled_ms"] == round((clock.now() - 2) * 1000)
    assert a["duetime.invocation.lag_s"] == pytest.approx(2.0)
    assert (a["duetime.invocation.attempt"], a["duetime.invocation.lane"]) == (1, "default")
    assert a["duetime.invocation.fence"] >= 1 and a["duetime.replica.id"] == "r1"
    assert a["duetime.invocation.outcome"] == "succeeded"
    assert "duetime.invocation.recorded" not in a  # only said when it was not
    assert run.status.status_code is StatusCode.UNSET


def test_a_recurring_jobs_runs_are_roots_linked_to_the_enqueue(spans, clock: FakeClock):
    with Scheduler(2, clock=clock, tracing=True) as s:
        with trace.get_tracer("app").start_as_current_span("deploy"):
            s.every("tracing.ok", 10, job_id="rec")
        for _ in range(2):
            clock.advance(10)
            assert s.wait_idle()
    [enqueue] = named(spans, "duetime enqueue")
    runs = named(spans, "duetime run")
    assert len(runs) == 2 and len({r.context.trace_id for r in runs}) == 2
    for run in runs:
        assert run.parent is None and run.context.trace_id != enqueue.context.trace_id
        [link] = run.links
        assert link.context.span_id == enqueue.context.span_id
    assert sorted(r.attributes["duetime.invocation.scheduled_ms"] for r in runs) == [
        round((clock.now() - 10) * 1000),
        round(clock.now() * 1000),
    ]


def test_a_failure_records_its_error_and_the_span_is_in_error(spans, clock: FakeClock):
    with Scheduler(1, clock=clock, tracing=True) as s:
        s.after("tracing.boom", 0)
        assert s.wait_idle()
    [run] = named(spans, "duetime run")
    assert run.attributes["duetime.invocation.outcome"] == "failed"
    assert run.attributes["error.type"] == "ValueError"
    assert run.status.status_code is StatusCode.ERROR
    [exc] = [e for e in run.events if e.name == "exception"]
    assert exc.attributes["exception.message"] == "boom"


def test_a_timeout_is_an_event_and_the_outcome(spans, clock: FakeClock):
    started = threading.Event()

    def slow() -> None:
        started.set()
        current_invocation().token.wait(10)  # returns once the timeout cancels it

    with Scheduler(1, clock=clock, tracing=True) as s:
        s.after(slow, 0, timeout=3)
        assert started.wait(5)
        clock.advance(3)
        assert s.wait_idle()
    [run] = named(spans, "duetime run")
    assert [e.name for e in run.events][:1] == ["duetime.timeout"]
    assert run.attributes["duetime.invocation.outcome"] == "timed_out"


def test_the_job_runs_inside_its_span(spans, clock: FakeClock):
    seen: list[int] = []

    def inner() -> None:
        with trace.get_tracer("job").start_as_current_span("inside") as span:
            seen.append(span.get_span_context().span_id)

    with Scheduler(1, clock=clock, tracing=True) as s:
        s.after(inner, 0)
        assert s.wait_idle()
    [run] = named(spans, "duetime run")
    [inside] = named(spans, "inside")
    assert inside.parent is not None and inside.parent.span_id == run.context.span_id


def test_off_by_default_nothing_is_stored_or_traced(spans, clock: FakeClock, monkeypatch):
    monkeypatch.delenv(trace_config.ENV, raising=False)
    with Scheduler(1, clock=clock) as s:
        with trace.get_tracer("app").start_as_current_span("request"):
            job = s.after("tracing.ok", 0)
        assert s.wait_idle()
        assert s.get(job).trace_id == ""
    assert named(spans, "duetime") == []


def test_the_environment_turns_it_on(spans, clock: FakeClock, monkeypatch):
    monkeypatch.setenv(trace_config.ENV, "1")
    with Scheduler(1, clock=clock) as s:
        s.after("tracing.ok", 0)
        assert s.wait_idle()
    assert len(named(spans, "duetime run")) == 1


def test_no_span_current_stores_no_trace_context(spans, clock: FakeClock):
    with Scheduler(1, clock=clock, tracing=True) as s:
        job = s.after("tracing.ok", 0)
        assert s.wait_idle()
        assert s.get(job).trace_id == ""
    [run] = named(spans, "duetime run")
    assert run.parent is None and named(spans, "duetime enqueue") == []


def test_a_client_stamps_what_it_enqueues(spans, clock: FakeClock):
    with Scheduler(1, clock=clock) as engine:  # tracing off in the engine
        client = Client(engine.store, tracing=True)
        with trace.get_tracer("app").start_as_current_span("request") as request:
            ids = client.enqueue_many([{"task": "tracing.ok", "delay": 60}] * 2)
        want = f"{request.get_span_context().trace_id:032x}"
        assert [engine.get(j).trace_id for j in ids] == [want, want]
    [enqueue] = named(spans, "duetime enqueue_many")
    assert enqueue.attributes["duetime.enqueue.count"] == 2


def test_a_malformed_trace_context_is_ignored_never_fails_the_job(spans, clock, caplog):
    caplog.set_level(logging.DEBUG, logger="duetime.tracing")
    with Scheduler(1, clock=clock, tracing=True) as s:
        spec = JobSpec("bad", TaskRef("tracing.ok"), After(0), trace=TraceContext("garbage"))
        s.store.add(spec)
        assert s.wait_idle()
        assert s.get("bad").runs == 1
    [run] = named(spans, "duetime run")
    assert run.parent is None and run.attributes["duetime.invocation.outcome"] == "succeeded"
    assert "not valid W3C" in caplog.text


def test_the_definition_carries_the_trace_context_as_its_last_member():
    spec = JobSpec("j", TaskRef("t", '{"a":1}'), After(1.0), trace=TraceContext(PARENT, "k=v"))
    text = definitions.encode(spec)
    assert text.endswith(f',"x":{{"traceparent":"{PARENT}","tracestate":"k=v"}}}}')
    back = definitions.decode(text, "j")
    assert back.trace == spec.trace and back == spec
    untraced = JobSpec("j", TaskRef("t", '{"a":1}'), After(1.0))
    assert definitions.encode(untraced) == text.split(',"x":')[0] + "}"
    assert back == untraced  # provenance, not definition


@pytest.mark.parametrize("junk", ['"00-1-2-3"', "[1]", '{"traceparent":7}', "null"])
def test_a_foreign_x_member_decodes_to_no_trace(junk, caplog):
    caplog.set_level(logging.DEBUG, logger="duetime.tracing")
    spec = definitions.decode('{"s":["after",1.0],"t":"t","x":' + junk + "}", "j")
    assert spec.trace is None and "ignored" in caplog.text


def test_an_upsert_from_another_trace_is_unchanged_in_every_store(store, clock: FakeClock):
    """The definition's trace context is provenance: add.lua compares definitions without
    it, as JobSpec's equality does; the first enqueue's context is kept."""
    first = JobSpec("up", TaskRef("tracing.ok"), After(60.0), trace=TraceContext(PARENT))
    other = TraceContext(PARENT.replace("0af7", "1111"))
    assert store.add(first).outcome == "created"
    assert store.add(JobSpec("up", TaskRef("tracing.ok"), After(60.0), trace=other)).outcome == (
        "unchanged"
    )
    assert store.get("up").trace_id == "0af7651916cd43dd8448eb211c80319c"
    untraced = JobSpec("up", TaskRef("tracing.ok"), After(60.0))  # a producer tracing off
    assert store.add(untraced).outcome == "unchanged"
    assert store.get("up").trace_id == "0af7651916cd43dd8448eb211c80319c"
    changed = JobSpec("up", TaskRef("tracing.ok"), After(30.0), trace=other)
    assert store.add(changed).outcome == "replaced"
    assert store.get("up").trace_id == "1111651916cd43dd8448eb211c80319c"


def test_with_no_sdk_the_tracer_builds_nothing(monkeypatch):
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: trace.NoOpTracerProvider())
    tracer = InvocationTracer("r", lambda: 0.0)
    claim_spec = JobSpec("j", TaskRef("tracing.ok"), After(0), trace=TraceContext(PARENT))
    from scheduler.model import Claim

    claim = Claim("j", 0.0, 1, "tok", 1, None, claim_spec, 1, "default")
    monkeypatch.setattr(InvocationTracer, "_attributes", lambda *a: pytest.fail("built"))
    assert tracer.start(claim) is None


def test_a_refused_outcome_ends_the_span_as_lease_lost(spans):
    tracer = InvocationTracer("r", lambda: 1.0)
    from scheduler.model import Claim

    spec = JobSpec("j", TaskRef("tracing.ok"), After(0), trace=TraceContext(PARENT))
    span = tracer.start(Claim("j", 0.0, 2, "tok", 9, 30.0, spec, 1, "default"))
    assert span is not None
    span.cancelled("lease lost")
    span.finished("succeeded", None)
    span.end(Commit.LEASE_LOST)
    [run] = named(spans, "duetime run")
    assert run.attributes["duetime.invocation.outcome"] == "lease_lost"
    [lost] = run.events  # found at renewal: the commit's refusal adds no second one
    assert lost.name == "duetime.lease_lost"
    assert lost.attributes["duetime.lease.found"] == "at renewal"
    assert run.status.status_code is StatusCode.ERROR
    assert f"{run.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"


def test_a_cron_occurrence_on_an_ambiguous_wall_time_says_which():
    c = Cron("30 1 * * *", "America/New_York")
    # 2024-11-03 01:30 EDT (05:30Z) and 01:30 EST (06:30Z): clocks went back at 02:00 EDT
    assert (
        dst_attributes(c, 1730611800.0)["duetime.cron.dst"] == "ambiguous=first: the earlier 01:30"
    )
    assert dst_attributes(c, 1730615400.0)["duetime.cron.dst"] == "ambiguous=first: the later 01:30"
    assert "duetime.cron.dst" not in dst_attributes(c, 1730698200.0)


def test_without_the_extra_tracing_true_says_what_to_install():
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import os, logging; logging.basicConfig()\n"
        "from scheduler import Scheduler\n"
        "try:\n"
        "    Scheduler(1, tracing=True)\n"
        "except ImportError as e:\n"
        "    print('refused:', e)\n"
        "os.environ['DUETIME_TRACING'] = '1'\n"
        "s = Scheduler(1); s.after(lambda: None, 0); s.shutdown(); print('ran untraced')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "refused: tracing=True: tracing needs the OpenTelemetry API" in out.stdout
    assert "pip install -e '.[otel]' from a checkout" in out.stdout
    assert "ran untraced" in out.stdout and "tracing stays off" in out.stderr


@pytest.mark.redis
def test_async_client_stamps_and_show_and_the_console_print_the_trace_id(
    spans, redis_url, redis_ns
):
    import asyncio
    import json

    from click.testing import CliRunner

    from scheduler import AsyncClient
    from scheduler.cli import main
    from scheduler.stores.redis import RedisStore
    from scheduler.web import data

    async def enqueue() -> tuple[str, int]:
        async with AsyncClient(redis_url, namespace=redis_ns, tracing=True) as client:
            with trace.get_tracer("app").start_as_current_span("request") as request:
                job = await client.enqueue("tracing.ok", delay=60, job_id="traced")
            return job, request.get_span_context().trace_id

    job, trace_id = asyncio.run(enqueue())
    want = f"{trace_id:032x}"
    runner = CliRunner(env={"DUETIME_REDIS_URL": redis_url, "DUETIME_NAMESPACE": redis_ns})
    shown = runner.invoke(main, ["show", job])
    assert shown.exit_code == 0 and f"trace        {want}" in shown.output.splitlines()
    as_json = json.loads(runner.invoke(main, ["show", job, "--json"]).output)
    assert as_json["trace_id"] == want
    store = RedisStore(redis_url, redis_ns)
    try:
        page = data.job(store, job, redact=False)
        assert page is not None and page["definition"]["trace_id"] == want
    finally:
        store.close()
    [enqueue_span] = named(spans, "duetime enqueue")
    assert f"{enqueue_span.context.trace_id:032x}" == want


def test_a_failing_tracer_never_stops_a_job(spans, clock: FakeClock, monkeypatch, caplog):
    def broken(*_: object) -> None:
        raise RuntimeError("exporter on fire")

    monkeypatch.setattr(InvocationTracer, "start", broken)
    with Scheduler(1, clock=clock, tracing=True) as s:
        job = s.after("tracing.ok", 0)
        assert s.wait_idle()
        assert s.get(job).runs == 1
    assert "no span for job" in caplog.text and "exporter on fire" in caplog.text


def test_tracing_off_never_asks_for_opentelemetry():
    """duetime does not import it (redis-py 8 imports some of it for its own
    observability: a Redis client is no evidence either way)."""
    code = (
        "import os, sys; os.environ.pop('DUETIME_TRACING', None)\n"
        "from scheduler import Client, Scheduler, tracing\n"
        "with Scheduler(1) as s:\n"
        "    s.after(lambda: None, 0); s.wait_idle()\n"
        "    Client(s.store).enqueue_many([])\n"
        "print(tracing._looked, 'opentelemetry.trace' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split()[:1] == ["False"], out.stderr


def test_a_runs_span_leaves_no_reference_cycle_to_collect(spans):
    """The span hears its job's cancel token only while the job runs: once it returned, no
    cycle (token -> callback -> span -> token) is left for the garbage collector, whose
    passes over such garbage cost more than the span itself (docs/tracing.md, the cost)."""
    import gc

    from scheduler.model import Claim
    from workers.context import CancelToken
    from workers.traced import OpenSpans

    tracer = InvocationTracer("r", lambda: 1.0)
    spec = JobSpec("j", TaskRef("tracing.ok"), After(0), trace=TraceContext(PARENT))
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        open_spans = OpenSpans()
        claim = Claim("j", 0.0, 1, "tok", 9, 30.0, spec, 1, "default")
        token = CancelToken()
        span = open_spans.start(tracer, claim, token)
        assert span is not None
        open_spans.finished(span, None, token.reason)
        open_spans.ended((claim,), (Commit.OK,))
        del span, token, open_spans
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage if type(o).__module__ == "scheduler.spans"]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []
    [run] = named(spans, "duetime run")
    assert run.attributes["duetime.invocation.outcome"] == "succeeded"
