"""Replicas as real processes against a real redis-server (SPEC §4.4, issue 3 tests).

Executions are counted by an independent witness (tests/integration/witness.py), not
by the store under test.
"""
from __future__ import annotations

import random
import signal
import uuid

import pytest

from scheduler import Client
from tests.integration.replicas import replicas, wait_until, witness_log

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def alive(client, ns: str) -> int:
    return len(client.keys(f"duetime:{{{ns}}}:replica:*"))


def test_three_replicas_run_each_invocation_exactly_once(redis_url, redis_ns, redis_client,
                                                          tmp_path):
    key = f"w{uuid.uuid4().hex[:8]}"
    rng = random.Random(1)
    with replicas(redis_url, redis_ns, key, count=3, workers=4, lease=5, resync=1,
                  log_dir=tmp_path) as fleet, Client(redis_url, namespace=redis_ns) as client:
        assert wait_until(lambda: alive(redis_client, redis_ns) == 3, 30), "replicas not up"
        once = [client.enqueue("witness.hit", delay=0.5 + 5 * rng.random())
                for _ in range(3000)]
        recurring = [client.enqueue("witness.hit", every=0.2, job_id=f"rec{i}")
                     for i in range(5)]
        execs = f"{key}:execs"

        def one_offs_done() -> int:
            return sum(1 for k in redis_client.hkeys(execs) if not k.startswith(b"rec"))

        assert wait_until(lambda: one_offs_done() == 3000, 30), one_offs_done()
        for job_id in recurring:
            assert client.cancel(job_id) is True
        codes = fleet.stop()
    assert codes == [0, 0, 0]  # graceful SIGTERM exit

    counts = {k.decode(): int(v) for k, v in redis_client.hgetall(execs).items()}
    assert all(n == 1 for n in counts.values()), "an invocation ran twice"
    assert {inv.split("@")[0] for inv in counts if not inv.startswith("rec")} == set(once)
    log = witness_log(redis_client, key)
    for job_id in recurring:
        scheds = sorted(e["sched"] for e in log if e["job"] == job_id)
        assert len(scheds) >= 20, (job_id, len(scheds))       # ~5 s at 200 ms
        steps = {b - a for a, b in zip(scheds, scheds[1:], strict=False)}
        assert steps == {200}, (job_id, sorted(steps))        # on the grid, none missed
        assert len(set(scheds)) == len(scheds)                # none twice
    assert {e["pid"] for e in log} and len({e["pid"] for e in log}) == 3  # all took part


def test_killed_replica_work_is_rerun_after_the_lease(redis_url, redis_ns, redis_client,
                                                     tmp_path):
    key = f"w{uuid.uuid4().hex[:8]}"
    with replicas(redis_url, redis_ns, key, count=2, workers=3, lease=1, resync=0.5,
                  log_dir=tmp_path) as fleet, Client(redis_url, namespace=redis_ns) as client:
        assert wait_until(lambda: alive(redis_client, redis_ns) == 2, 30)
        jobs = [client.enqueue("witness.slow", kwargs={"seconds": 2.0}) for _ in range(6)]
        assert wait_until(lambda: len(witness_log(redis_client, key)) == 6, 10)
        victim_pid = fleet.procs[0][0].pid
        held = {e["job"] for e in witness_log(redis_client, key) if e["pid"] == victim_pid}
        assert held, "the victim held nothing"
        fleet.kill(0)
        done = f"{key}:done"
        assert wait_until(lambda: redis_client.hlen(done) == 6, 15), redis_client.hgetall(done)
    log = witness_log(redis_client, key)
    for job_id in jobs:
        runs = [e for e in log if e["job"] == job_id]
        if job_id in held:   # started by the victim, then re-run by the survivor
            assert [e["attempt"] for e in runs] == [1, 2]
            assert runs[1]["fence"] > runs[0]["fence"]
        else:
            assert [e["attempt"] for e in runs] == [1]
        assert client.get(job_id).state == "succeeded"


def test_stopped_owner_cannot_commit_after_its_lease(redis_url, redis_ns, redis_client,
                                                    tmp_path):
    """SIGSTOP past the lease, then SIGCONT: the stale owner's completion is refused."""
    key = f"w{uuid.uuid4().hex[:8]}"
    with replicas(redis_url, redis_ns, key, count=2, workers=1, lease=1, resync=0.5,
                  log_dir=tmp_path) as fleet, Client(redis_url, namespace=redis_ns) as client:
        assert wait_until(lambda: alive(redis_client, redis_ns) == 2, 30)
        job = client.enqueue("witness.slow", kwargs={"seconds": 1.5})
        assert wait_until(lambda: len(witness_log(redis_client, key)) == 1, 10)
        first = witness_log(redis_client, key)[0]
        owner = next(i for i, (p, _) in enumerate(fleet.procs) if p.pid == first["pid"])
        fleet.signal(owner, signal.SIGSTOP)
        assert wait_until(lambda: len(witness_log(redis_client, key)) == 2, 10)  # re-run
        fleet.signal(owner, signal.SIGCONT)
        assert wait_until(lambda: redis_client.hlen(f"{key}:done") == 1
                          and client.get(job).state == "succeeded", 10)
        assert wait_until(lambda: any(e.kind == "succeeded" for e in client.events(1000)), 5)
        fleet.stop()
    events = [e for e in client.events(1000) if e.job_id == job]
    assert [e.attempt for e in events if e.kind == "succeeded"] == [2]  # one commit only
    assert client.get(job).runs == 1


def test_replica_clock_skew_of_five_minutes_changes_nothing(redis_url, redis_ns, redis_client,
                                                           tmp_path):
    """Replicas whose wall clocks are 300 s ahead and behind: no early run, no late one
    (lateness measured on the witness server's clock)."""
    key = f"w{uuid.uuid4().hex[:8]}"
    with replicas(redis_url, redis_ns, key, count=2, workers=2, lease=5, resync=1,
                  log_dir=tmp_path, skews=[300.0, -300.0]), \
            Client(redis_url, namespace=redis_ns) as client:
        assert wait_until(lambda: alive(redis_client, redis_ns) == 2, 30)
        jobs = [client.enqueue("witness.hit", delay=0.5 + i / 50) for i in range(50)]
        assert wait_until(lambda: len(witness_log(redis_client, key)) == 50, 15)
    log = witness_log(redis_client, key)
    assert sorted(e["job"] for e in log) == sorted(jobs)
    lateness = [e["start_ms"] - e["sched"] for e in log]
    assert min(lateness) >= 0, "a job ran early"
    assert max(lateness) < 1000, max(lateness)      # on time, not 300 s off
    assert len({e["pid"] for e in log}) == 2          # both skewed replicas ran jobs
