"""Prometheus metrics: exact values under the fake clock."""

from __future__ import annotations

import pytest

from scheduler.metrics import PrometheusMetrics

prom = pytest.importorskip("prometheus_client")


def value(metrics, name, **labels):
    return metrics.registry.get_sample_value(name, labels or None)


def test_claims_lag_and_outcomes(make_engine, clock):
    metrics = PrometheusMetrics(
        namespace_source=lambda: {
            "queue_depth": {"default": 7},
            "running": 1,
            "replicas": 3,
            "events": {"skipped": 2},
        }
    )
    eng = make_engine(metrics=metrics)

    def boom():
        raise RuntimeError("x")

    eng.after(lambda: None, 3)
    eng.after(lambda: None, 3)
    eng.after(boom, 4)
    clock.advance(5)  # claimed 2 s and 1 s after their due times
    assert eng.wait_idle()
    assert value(metrics, "duetime_claims_total", lane="default") == 3
    assert value(metrics, "duetime_runs_total", lane="default", outcome="succeeded") == 2
    assert value(metrics, "duetime_runs_total", lane="default", outcome="failed") == 1
    assert value(metrics, "duetime_dispatch_lag_seconds_count", lane="default") == 3
    assert value(metrics, "duetime_dispatch_lag_seconds_sum", lane="default") == 5.0
    assert value(metrics, "duetime_dispatch_lag_seconds_bucket", lane="default", le="1.0") == 1
    assert value(metrics, "duetime_queue_depth", lane="default") == 7
    assert value(metrics, "duetime_replicas_alive") == 3
    assert value(metrics, "duetime_events_total", kind="skipped") == 2
    text = prom.generate_latest(metrics.registry).decode()
    assert "duetime_dispatch_lag_seconds_bucket" in text
