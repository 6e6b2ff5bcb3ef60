"""Skips on the span of the run that follows them (docs/tracing.md, span events): the
occurrences of a recurring job the store skipped since the job's previous claim (misfire,
overlap) are a ``duetime.skipped`` event of the next run's span, in every store (the claim
carries them: tests/contract/test_told_skips.py).

The SDK's ``InMemorySpanExporter`` as in tests/unit/test_tracing.py; the fake clock.
"""

from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from scheduler import Scheduler
from scheduler.model import Misfire, Overlap
from scheduler.spans import InvocationTracer
from scheduler.testing import FakeClock
from tests.conftest import START
from tests.helpers import every
from tests.unit.test_tracing import EXPORTER, _provider, named

ALL = {"default": 100}


@pytest.fixture
def spans() -> InMemorySpanExporter:
    """The process's one SDK provider's in-memory exporter (tests/unit/test_tracing.py)."""
    _provider()
    EXPORTER.clear()
    return EXPORTER


def skipped_events(run) -> list[dict]:
    return [dict(e.attributes) for e in run.events if e.name == "duetime.skipped"]


def test_a_misfire_skip_is_an_event_of_the_run_that_follows(
    spans: InMemorySpanExporter, store, clock: FakeClock
):
    """Through an engine: its runner starts the span from the claim's skips."""
    store.add(every("r", 1, misfire=Misfire.SKIP))
    clock.advance(5.5)  # 1..4 late by more than the 1 s grace: skipped; 5 runs
    with Scheduler(1, store=store, clock=clock, tracing=True) as s:
        assert s.wait_idle()
    [run] = named(spans, "duetime run")
    assert run.attributes["duetime.invocation.scheduled_ms"] == round((START + 5) * 1000)
    assert skipped_events(run) == [
        {
            "duetime.skipped.count": 4,
            "duetime.skipped.first_ms": round((START + 1) * 1000),
            "duetime.skipped.last_ms": round((START + 4) * 1000),
            "duetime.skipped.reason": "misfire",
        }
    ]


def test_overlap_skips_are_one_event_of_the_next_run_and_told_once(
    spans: InMemorySpanExporter, store, clock: FakeClock
):
    tracer = InvocationTracer("r1", clock.now)
    store.add(every("r", 1, overlap=Overlap.SKIP))

    def run_next() -> None:
        (claim,) = store.claim_due(ALL, None, "owner-1").claims
        span = tracer.start(claim)
        assert span is not None
        span.finished("succeeded", None)
        span.end(store.complete(claim, None))

    clock.advance(1)
    (first,) = store.claim_due(ALL, None, "owner-1").claims  # runs long:
    for _ in range(3):  # 2, 3 and 4 find it running
        clock.advance(1)
        assert store.claim_due(ALL, None, "owner-1").claims == []
    store.complete(first, None)
    for _ in range(2):
        clock.advance(1)
        run_next()  # 5, then 6
    five, six = named(spans, "duetime run")
    assert skipped_events(five) == [
        {
            "duetime.skipped.count": 3,
            "duetime.skipped.first_ms": round((START + 2) * 1000),
            "duetime.skipped.last_ms": round((START + 4) * 1000),
            "duetime.skipped.reason": "overlap",
        }
    ]
    assert skipped_events(six) == []


def test_no_skip_no_event(spans: InMemorySpanExporter, clock: FakeClock):
    done = threading.Event()
    with Scheduler(1, clock=clock, tracing=True) as s:
        s.every(done.set, 10)
        clock.advance(10)
        assert s.wait_idle() and done.is_set()
    [run] = named(spans, "duetime run")
    assert run.events == ()
