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
            "quarantined": 4,
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
    assert value(metrics, "duetime_quarantined") == 4
    text = prom.generate_latest(metrics.registry).decode()
    assert "duetime_dispatch_lag_seconds_bucket" in text


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
    assert {"DuetimeQuarantineNotEmpty"} <= {r["alert"] for r in rules}
    for rule in rules:
        assert set(rule) >= {"alert", "expr", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in {"page", "ticket"}
        assert rule["annotations"]["summary"] and rule["annotations"]["runbook"]
        for name in re.findall(r"duetime_[a-z_]+", rule["expr"]):
            assert name in exported, (rule["alert"], name)
    if shutil.which("promtool"):
        out = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True)
        assert out.returncode == 0, out.stderr
