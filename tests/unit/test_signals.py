"""scheduler/signals.py: the replica's periodic summary and its readiness, from the
engine's metric hooks alone (exact figures under the fake clock)."""

from __future__ import annotations

import json
import logging
import random

import pytest

from scheduler import RetryPolicy
from scheduler.log import JsonFormatter
from scheduler.metrics import Metrics, Run
from scheduler.signals import MAX_SAMPLES, Signals, percentile, summary_line


class Recording(Metrics):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def claimed(self, lane, lag):
        self.calls.append(("claimed", lane, lag))

    def finished(self, lane, outcome):
        self.calls.append(("finished", lane, outcome))

    def ran(self, lane, task, outcome, seconds, waited):
        self.calls.append(("ran", task, outcome, seconds))

    def claim_round(self, error):
        self.calls.append(("round", error))


def test_the_summary_counts_the_period_and_forwards_every_hook(make_engine, clock):
    inner = Recording()
    signals = Signals(inner, clock=clock)
    eng = make_engine(metrics=signals)
    flaky_calls = []

    def boom():
        raise RuntimeError("x")

    def flaky():
        flaky_calls.append(1)
        clock.advance(0.25)  # the call takes 250 ms of the fake clock
        if len(flaky_calls) == 1:
            raise RuntimeError("once")

    eng.after(lambda: None, 3)
    eng.after(lambda: None, 3)
    eng.after(boom, 4)
    eng.after(flaky, 4, retry=RetryPolicy(max_attempts=2, backoff=100, jitter=0))
    clock.advance(5)  # claimed 2, 2, 1 and 1 s late
    assert eng.wait_idle()
    s = signals.take()
    assert (s["succeeded"], s["failed"], s["retried"], s["lease_lost"]) == (2, 1, 1, 0)
    assert s["claims"] == 4 and s["seconds"] == pytest.approx(5.25)
    assert (s["lag_p50_ms"], s["lag_p99_ms"]) == (1000.0, 2000.0)
    assert (s["wait_p50_ms"], s["wait_p99_ms"]) == (0.0, 0.0)
    assert ("ran", "callable", "retried", 0.25) in inner.calls
    assert sum(1 for c in inner.calls if c[0] == "claimed") == 4
    assert ("round", None) in inner.calls
    clock.advance(100)  # the retry
    assert eng.wait_idle()
    s = signals.take()  # a new period
    assert (s["succeeded"], s["failed"], s["retried"], s["claims"]) == (1, 0, 0, 1)


def test_the_summary_line_text_and_json(clock, caplog):
    signals = Signals(clock=clock, owner="replica-1")
    for lag in (0.001, 0.002, 0.003, 0.1):
        signals.claimed("default", lag)
        signals.finished("default", "succeeded")
        signals.ran("default", "t", "succeeded", 0.01, 0.0005)
    signals.finished("default", "failed")
    signals.lease_lost(2)
    clock.advance(60)
    with caplog.at_level(logging.INFO, logger="duetime"):
        signals.log_summary()
    (record,) = caplog.records
    assert record.getMessage() == (
        "summary of the last 60s: 4 succeeded, 1 failed, 0 retried, 2 lease(s) lost; "
        "lag p50 2 ms, p99 100 ms over 4 claims; queue wait p50 0.5 ms, p99 0.5 ms"
    )
    line = json.loads(JsonFormatter().format(record))
    assert line["event"] == "summary" and line["replica"] == "replica-1"
    assert line["summary"]["succeeded"] == 4 and line["summary"]["lag_p99_ms"] == 100.0
    assert summary_line(signals.take()) == "summary of the last 0s: 0 succeeded, 0 failed, " + (
        "0 retried; no claims"
    )
    signals.claimed("default", 1056.94)  # a lag past a second reads in seconds
    assert "lag p50 1,056.9 s, p99 1,056.9 s over 1 claims" in summary_line(signals.take())


def test_percentiles_and_a_bounded_sample():
    assert percentile([], 0.5) is None
    values = [float(i) for i in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.99), percentile(values, 1)) == (
        50.0,
        99.0,
        100.0,
    )
    signals = Signals(rng=random.Random(1))
    for i in range(3 * MAX_SAMPLES):
        signals.claimed("default", i / 1000)
    s = signals.take()
    assert s["claims"] == 3 * MAX_SAMPLES  # every claim counted, a uniform sample kept
    assert 0.4 * 3 * MAX_SAMPLES < s["lag_p50_ms"] < 0.6 * 3 * MAX_SAMPLES


def test_ready_after_a_recent_claim_round_that_worked(clock):
    signals = Signals(clock=clock, ready_within=15)
    assert signals.ready() == (False, "no claim round has reached the store yet")
    signals.claim_round(None)
    assert signals.ready()[0]
    clock.advance(15)
    assert signals.ready()[0]
    clock.advance(1)
    ok, why = signals.ready()
    assert not ok and "16.0s ago" in why
    signals.claim_round(None)
    signals.claim_round(ConnectionError("refused"))
    ok, why = signals.ready()
    assert not ok and "failed" in why and "ConnectionError: refused" in why
    signals.claim_round(None)
    assert signals.ready()[0]
    signals.stopping()
    assert signals.ready() == (False, "shutting down")


def test_an_engine_reports_its_claim_rounds(make_engine, clock):
    signals = Signals(clock=clock)
    make_engine(metrics=signals).wait_idle()
    assert signals.ready()[0]


def _hooks() -> list[str]:
    return [n for n in vars(Metrics) if not n.startswith("_") and callable(getattr(Metrics, n))]


@pytest.mark.parametrize("wrapper", ["signals", "recorder"])
def test_a_replicas_metric_wrappers_forward_every_hook(wrapper):
    """A replica wraps its Prometheus metrics in Recorder(Signals(...)): a hook either
    wrapper dropped (loop_lag once was) would leave its series empty in production."""
    from scheduler.recorder import Recorder

    got: list[str] = []

    class Everything(Metrics):
        pass

    for name in _hooks():
        setattr(Everything, name, lambda self, *a, _n=name: got.append(_n))
    inner = Everything()
    outer = Signals(inner) if wrapper == "signals" else Recorder(inner, None, "r1")
    args = {
        "claimed": ("default", 0.1),
        "claimed_many": ([("default", 0.1)],),
        "succeeded_many": ([Run("default", "t", 0.1, 0.0)],),
        "finished": ("default", "succeeded"),
        "ran": ("default", "t", "succeeded", 0.1, 0.0),
        "renewed": (1,),
        "lease_lost": (1,),
        "claim_round": (None,),
        "loop_lag": ("default", 0.01),
        "loop_lag_many": ([("default", 0.01)],),
    }
    assert sorted(args) == sorted(_hooks())  # a new hook: add it here
    for name, a in args.items():
        got.clear()
        getattr(outer, name)(*a)
        assert got, f"{type(outer).__name__}.{name} did not reach the metrics it wraps"
