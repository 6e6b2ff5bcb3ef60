"""Tracing across processes (docs/tracing.md): a producer process enqueues a job inside a
span; two replica processes (``duetime run --tracing``) run it; the first is SIGSTOPped
past its lease while attempt 1 runs, the other runs attempt 2; continued, the first finds
its lease lost. Every span lands in the producer's trace:

    POST /orders -> duetime enqueue traced.hold -> duetime run (attempt 1, lease_lost)
                                                -> duetime run (attempt 2, succeeded)

Each process exports its spans as JSON lines (tests/integration/traced_app.py). The test
waits on what the processes tell it (a Redis list the task pushes to; the job's state),
never on a sleep.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from scheduler import Client
from tests.faults.fleet import ROOT, replicas, wait_until
from tests.integration.traced_app import read_spans

pytestmark = [pytest.mark.redis, pytest.mark.slow]

LEASE = 1.5


def test_a_jobs_attempts_join_the_trace_of_its_enqueue(
    redis_url, redis_ns, redis_client, tmp_path, monkeypatch
):
    monkeypatch.setenv("TRACE_DIR", str(tmp_path))
    monkeypatch.setenv("TRACED_REDIS", redis_url)
    started = f"{redis_ns}:started"
    with (
        replicas(
            redis_url,
            redis_ns,
            "unused",
            count=2,
            workers=2,
            lease=LEASE,
            resync=0.5,
            log_dir=tmp_path,
            imports=("tests.integration.traced_app",),
            extra=("--tracing",),
        ) as fleet,
        Client(redis_url, namespace=redis_ns) as client,
    ):
        assert wait_until(
            lambda: len(redis_client.keys(f"duetime:{{{redis_ns}}}:replica:*")) == 2, 30
        ), fleet.log_text()
        out = subprocess.run(
            [sys.executable, "-m", "tests.integration.traced_app", "produce", redis_url, redis_ns],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        job_id = out.stdout.strip()
        first = json.loads(redis_client.blpop([started], 30)[1])  # attempt 1 runs
        assert first["attempt"] == 1
        stopped = fleet.index_of(first["pid"])
        fleet.signal(stopped, signal.SIGSTOP)  # past its lease: the other one takes over
        second = json.loads(redis_client.blpop([started], 30)[1])
        assert (second["attempt"], second["pid"] != first["pid"]) == (2, True)
        assert wait_until(lambda: client.get(job_id).state == "succeeded", 30)
        fleet.signal(stopped, signal.SIGCONT)  # its heartbeat now finds the lease lost

        def attempt_one_ended() -> bool:
            return any(
                s["attributes"].get("duetime.invocation.attempt") == 1 for s in read_spans(tmp_path)
            )

        assert wait_until(attempt_one_ended, 30), fleet.log_text()
        trace_id = client.get(job_id).trace_id
        assert fleet.stop() == [0, 0]

    spans = read_spans(tmp_path)
    by_name = {}
    for s in spans:
        by_name.setdefault(s["name"], []).append(s)
    [request] = by_name["POST /orders"]
    [enqueue] = by_name["duetime enqueue traced.hold"]
    runs = sorted(
        by_name["duetime run traced.hold"],
        key=lambda s: s["attributes"]["duetime.invocation.attempt"],
    )
    assert {s["trace_id"] for s in spans} == {request["trace_id"]} == {trace_id}
    assert enqueue["kind"] == "PRODUCER" and enqueue["parent"] == request["span_id"]
    assert [r["parent"] for r in runs] == [enqueue["span_id"]] * 2
    one, two = (r["attributes"] for r in runs)
    assert (one["duetime.invocation.attempt"], two["duetime.invocation.attempt"]) == (1, 2)
    assert one["duetime.invocation.outcome"] == "lease_lost" and runs[0]["status"] == "ERROR"
    [lost] = runs[0]["events"]  # its heartbeat found it once continued; its commit refused
    assert lost["name"] == "duetime.lease_lost"
    assert lost["attributes"]["duetime.lease.found"] == "at renewal"
    assert two["duetime.invocation.outcome"] == "succeeded" and runs[1]["status"] == "UNSET"
    assert two["duetime.invocation.fence"] > one["duetime.invocation.fence"]
    assert f"-{first['pid']}-" in one["duetime.replica.id"]
    assert f"-{second['pid']}-" in two["duetime.replica.id"]
    for a in (one, two):
        assert a["duetime.job.id"] == job_id and a["duetime.job.task"] == "traced.hold"
        assert a["duetime.invocation.scheduled_ms"] == one["duetime.invocation.scheduled_ms"]
        assert a["duetime.invocation.lag_s"] >= 0 and a["duetime.invocation.lane"] == "default"
    assert two["duetime.invocation.lag_s"] >= LEASE  # it waited for the lease to lapse
