"""Prometheus metrics: exact values under the fake clock; the endpoint's health checks."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

import pytest

from scheduler import task
from scheduler.metrics import PrometheusMetrics

prom = pytest.importorskip("prometheus_client")


def value(metrics, name, **labels):
    return metrics.registry.get_sample_value(name, {"namespace": metrics.namespace, **labels})


@task("tests.metrics.sleepy")
def sleepy() -> None:
    from tests.unit.test_metrics import CLOCK

    CLOCK[0].advance(2.0)  # the call takes 2 s of the fake clock


CLOCK: list = []


def test_claims_lag_and_outcomes(make_engine, clock):
    metrics = PrometheusMetrics(
        namespace="prod",
        namespace_source=lambda: {
            "queue_depth": {"default": 7},
            "running": 1,
            "replicas": 3,
            "events": {"skipped": 2},
            "quarantined": 4,
            "waiting": {"reports.build": 5},
        },
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
    # exported from 0: DuetimeDataLoss's increase() sees the first alarm (a series that
    # appears at 1 has no increase)
    assert value(metrics, "duetime_events_total", kind="data_loss") == 0
    assert value(metrics, "duetime_quarantined") == 4
    assert value(metrics, "duetime_waiting_for_task", task="reports.build") == 5
    assert value(metrics, "duetime_metrics_leader") == 1
    assert value(metrics, "duetime_run_duration_seconds_count", task="callable", outcome="failed")
    text = prom.generate_latest(metrics.registry).decode()
    assert "duetime_dispatch_lag_seconds_bucket" in text
    duetime = [line for line in text.splitlines() if line.startswith("duetime_")]
    assert duetime and all('namespace="prod"' in line for line in duetime)
    if sys.platform == "linux":  # the process collector reads /proc
        assert "process_cpu_seconds_total" in text and "process_resident_memory_bytes" in text
    assert "python_gc_objects_collected_total" in text and "python_info" in text


def test_run_duration_per_task(make_engine, clock):
    CLOCK[:] = [clock]
    metrics = PrometheusMetrics()
    eng = make_engine(metrics=metrics)
    eng.after("tests.metrics.sleepy", 1)
    eng.after(lambda: None, 1)
    clock.advance(1)
    assert eng.wait_idle()
    got = value(
        metrics,
        "duetime_run_duration_seconds_sum",
        task="tests.metrics.sleepy",
        outcome="succeeded",
    )
    assert got == 2.0
    assert (
        value(metrics, "duetime_run_duration_seconds_count", task="callable", outcome="succeeded")
        == 1
    )
    assert (
        value(
            metrics,
            "duetime_run_duration_seconds_bucket",
            task="tests.metrics.sleepy",
            outcome="succeeded",
            le="1.0",
        )
        == 0
    )


def test_only_the_leader_exports_the_namespace_gauges():
    """A source that returns None (another replica holds ``metrics-leader``): none of the
    namespace-wide series, and ``duetime_metrics_leader`` 0; a source that fails (Redis
    down): the same, and the replica's own series are still served."""

    def failing():
        raise ConnectionError("down")

    for source in (lambda: None, failing):
        metrics = PrometheusMetrics(namespace="prod", namespace_source=source)
        metrics.claimed("default", 0.5)
        text = prom.generate_latest(metrics.registry).decode()
        assert value(metrics, "duetime_metrics_leader") == 0
        for name in ("duetime_queue_depth", "duetime_running", "duetime_replicas_alive"):
            assert f"\n{name}{{" not in text and f"\n{name} " not in text
        assert value(metrics, "duetime_claims_total", lane="default") == 1


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_endpoint_serves_metrics_and_health():
    state = {"ready": (False, "no claim round has reached the store yet")}
    metrics = PrometheusMetrics(namespace="prod")
    endpoint = metrics.serve(0, "127.0.0.1", ready=lambda: state["ready"])
    base = f"http://127.0.0.1:{endpoint.port}"
    try:
        assert get(base + "/healthz") == (200, "ok\n")
        assert get(base + "/readyz") == (
            503,
            "not ready: no claim round has reached the store yet\n",
        )
        state["ready"] = (True, "the last claim round reached the store 0.1s ago")
        assert get(base + "/readyz")[0] == 200
        status, text = get(base + "/metrics")
        assert status == 200 and "duetime_lease_losses_total" in text
        assert get(base + "/nope")[0] == 404
        for path, status in (("/healthz", 200), ("/readyz", 200), ("/nope", 404)):
            head = urllib.request.Request(base + path, method="HEAD")  # a probe's HEAD: was 501
            try:
                with urllib.request.urlopen(head, timeout=5) as reply:
                    assert (reply.status, reply.read()) == (status, b"")
            except urllib.error.HTTPError as refused:
                assert refused.code == status == 404
        assert endpoint.url == base
    finally:
        endpoint.close()


def test_the_example_alert_rules_are_valid_and_name_real_metrics():
    """deploy/prometheus/alerts.yml: the rule file's shape (what promtool checks first),
    and every metric an expression names is one duetime exports."""
    import pathlib
    import re
    import shutil
    import subprocess

    import yaml

    path = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
    doc = yaml.safe_load(path.read_text())
    exported = set(
        re.findall(
            r'"(duetime_[a-z_]+)"',
            (pathlib.Path(__file__).resolve().parents[2] / "scheduler" / "metrics.py").read_text(),
        )
    )
    exported |= {f"{m}_total" for m in exported} | {f"{m}_bucket" for m in exported}
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert {
        "DuetimeQuarantineNotEmpty",
        "DuetimeDataLoss",
        "DuetimeDispatchLagHigh",
        "DuetimeJobFailures",
        "DuetimeLeaseLosses",
        "DuetimeNoLiveReplica",
        "DuetimeTaskNotServed",
    } <= {r["alert"] for r in rules}
    for rule in rules:
        assert set(rule) >= {"alert", "expr", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in {"page", "ticket"}
        assert rule["annotations"]["summary"] and rule["annotations"]["runbook"]
        for name in re.findall(r"duetime_[a-z_]+", rule["expr"]):
            assert name in exported, (rule["alert"], name)
        # every aggregation keeps the namespace apart (one alert per namespace)
        for agg in re.findall(r"\b(?:sum|max|min|avg|count)\b(?: by \(([^)]*)\))?", rule["expr"]):
            assert "namespace" in agg, (rule["alert"], rule["expr"])
    if shutil.which("promtool"):
        out = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True)
        assert out.returncode == 0, out.stderr


def test_a_namespace_read_that_hangs_leaves_the_scrape_on_time(monkeypatch):
    """A Redis that hung made /metrics take 15 s (two reads in a row, each waiting out
    the socket timeout), past Prometheus's 10 s scrape timeout: the whole scrape, the
    replica's own series with it, was lost."""
    import threading
    import time

    from scheduler.metrics import _NamespaceCollector

    monkeypatch.setattr(_NamespaceCollector, "deadline", 0.2)
    release, calls = threading.Event(), []

    def hung() -> dict:
        calls.append(1)
        release.wait(10)
        return {"replicas": 3}

    metrics = PrometheusMetrics(namespace="prod", namespace_source=hung)
    started = time.monotonic()
    assert value(metrics, "duetime_metrics_leader") == 0  # left out of this scrape
    assert value(metrics, "duetime_metrics_leader") == 0  # the read still hangs: not again
    assert time.monotonic() - started < 2 and len(calls) == 1
    release.set()
    deadline = time.monotonic() + 5
    while value(metrics, "duetime_replicas_alive") != 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert value(metrics, "duetime_replicas_alive") == 3  # read again once the store answers


def test_limit_gauges_per_scope_in_process():
    """An in-process store's limits as gauges (docs/flow-control.md, "Watching limits"):
    labelled by declared scope only, however many keys it governs."""
    from scheduler import flow
    from scheduler.limit_usage import figures
    from scheduler.model import After, JobSpec, TaskRef
    from scheduler.stores.memory import MemoryStore
    from scheduler.testing import FakeClock

    clock = FakeClock(start=1_700_000_000.0)
    store = MemoryStore(clock)
    store.set_limit("customer:*", flow.limit(concurrency=1))
    store.set_limit("idle", flow.limit(rate=5, per=60))
    for key, n in (("customer:1", 3), ("customer:2", 2)):
        for i in range(n):
            store.add(JobSpec(f"{key}-{i}", TaskRef("t.x"), After(0), limit_key=key))
    clock.advance(0.001)
    assert len(store.claim_due({"default": 10}, 30.0, "o").claims) == 2  # one per key
    clock.advance(2)
    metrics = PrometheusMetrics(
        namespace="app", namespace_source=lambda: {"limits": figures(store.limit_usage())}
    )
    assert value(metrics, "duetime_limit_running", scope="customer:*") == 2
    assert value(metrics, "duetime_limit_waiting_jobs", scope="customer:*") == 3
    assert value(metrics, "duetime_limit_held_jobs", scope="customer:*") == 3
    assert value(metrics, "duetime_limit_full_keys", scope="customer:*") == 2
    assert value(metrics, "duetime_limit_window_starts", scope="customer:*") == 0
    assert value(metrics, "duetime_limit_oldest_wait_seconds", scope="customer:*") == 2.001
    assert value(metrics, "duetime_limit_waiting_jobs", scope="idle") == 0
    assert value(metrics, "duetime_limit_oldest_wait_seconds", scope="idle") == 0
    text = prom.generate_latest(metrics.registry).decode()
    assert 'scope="customer:1"' not in text  # never a label per key
    store.set_limit("customer:*", None)
    assert value(metrics, "duetime_limit_running", scope="customer:*") is None  # gone with it
