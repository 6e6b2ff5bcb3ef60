"""Issue 13 on a real redis-server clock (Redis TIME, no fake clock): a delay counts from
Redis TIME rounded up (never early), a fractional interval is stored exactly (and marks
the namespace's layout 2), and a job enqueued for a time in the past shows no lag in
``duetime stats`` nor in the Prometheus lag histogram."""

from __future__ import annotations

import time

import pytest

import tests.helpers  # noqa: F401  (registers tests.noop)
from scheduler import Scheduler
from scheduler.model import After, Every
from scheduler.stores.redis.reading import queries
from tests.helpers import read_job_field, spec

pytestmark = pytest.mark.redis


@pytest.fixture
def store(ns_store):
    return ns_store  # tests/integration/conftest.py


def test_a_delay_counts_from_redis_time_rounded_up(store):
    for i in range(20):
        sec, usec = store.redis.time()
        before_us = sec * 1_000_000 + usec
        store.add(spec(f"d{i}", After(0.001)))
        due_ms = int(read_job_field(store.redis, store.keys.job(f"d{i}"), "next"))
        assert due_ms * 1000 >= before_us + 1000, "due before TIME + delay"


def test_a_fractional_interval_is_stored_exactly(store):
    """Whole ms as before; a fraction as "<p>/<q>" ms (layout 2, within layout 4: every add
    packs a job's small fields, include/st.lua, and an older duetime refuses it loudly)."""
    store.add(spec("whole", Every(0.25)))
    assert store.redis.hget(store.keys.job("whole"), "interval") == "250"
    store.add(spec("third", Every(1 / 3)))
    assert store.redis.hget(store.keys.job("third"), "interval") == "1000/3"
    assert store.redis.get(store.keys.layout) == "4"


def test_an_old_whole_ms_interval_field_keeps_working(store, redis_ns):
    store.add(spec("old", Every(0.5)))
    assert store.redis.hget(store.keys.job("old"), "interval") == "500"  # the old layout
    time.sleep(0.6)
    batch = store.claim_due({"default": 10}, None, "o")
    assert [c.job_id for c in batch.claims] == ["old"]


def test_a_job_enqueued_in_the_past_is_not_late_in_stats_or_metrics(store):
    from scheduler.metrics import PrometheusMetrics

    metrics = PrometheusMetrics(namespace="lag")
    hour_ago = time.time() - 3600
    began = time.time()
    with Scheduler(1, store=store, metrics=metrics) as engine:
        engine.at("tests.noop", hour_ago)
        for _ in range(3):
            engine.after("tests.noop", 0)
        assert engine.wait_idle(5)
    took = (time.time() - began) * 1000
    lag = queries.stats(store)["lag_ms"]
    # counted from when each became claimable, no lag exceeds the time this test ran
    # (+2 ms: two whole-ms readings); from the due time, one would be an hour
    assert lag["samples"] == 4 and lag["max"] <= took + 2, (lag, took)
    claimed = [e for e in store.events(50) if e.kind == "claimed"]
    assert any(e.ready is not None and e.ready > e.scheduled + 3000 for e in claimed)
    total = metrics.registry.get_sample_value(
        "duetime_dispatch_lag_seconds_sum", {"lane": "default", "namespace": "lag"}
    )
    assert total is not None and total < 4.0
