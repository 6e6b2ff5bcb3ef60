"""A fleet whose replicas have different code, as real processes on a real redis-server
(docs/guarantees.md, "Which replica runs a job"): one replica has every task, one an older
module that lacks a task, one no task module at all. Every invocation runs exactly once, on
a replica that has its task, at its first attempt; a task no live replica serves waits,
visibly, and runs when a replica with it starts.

Executions are counted by the witness (tests/faults/witness.py), not by the store."""

from __future__ import annotations

import random
import subprocess
import sys
import uuid
from collections import Counter

import pytest

from scheduler import Client
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.reading import fleet
from tests.faults.fleet import Fleet, wait_until, witness_log

pytestmark = [pytest.mark.redis, pytest.mark.slow]

OLD = ("tests.faults.witness",)  # lacks witness.new
NEW = (*OLD, "tests.faults.witness_new")


def start(url: str, ns: str, key: str, imports: tuple[str, ...], log_dir, **kw) -> Fleet:
    log_dir.mkdir(exist_ok=True)
    return Fleet(
        url, ns, url, key, count=1, workers=4, lease=5, resync=1, log_dir=log_dir,
        imports=imports, **kw,
    )  # fmt: skip


def alive(store: RedisStore) -> int:
    return len(fleet.replicas(store))


def enqueue_mix(client: Client, n: int, seed: int) -> dict[str, str]:
    """``n`` one-off jobs due within 0.5-3 s, a quarter of them the new task's: job id ->
    task."""
    rng = random.Random(seed)
    out = {}
    for i in range(n):
        name = "witness.new" if i % 4 == 0 else "witness.hit"
        out[client.enqueue(name, delay=0.5 + 2.5 * rng.random())] = name
    return out


def test_each_job_runs_once_on_a_replica_with_its_task_and_at_its_first_attempt(
    redis_url, redis_ns, redis_client, tmp_path
):
    key = f"w{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis_url, redis_ns)
    new = start(redis_url, redis_ns, key, NEW, tmp_path / "new")
    old = start(redis_url, redis_ns, key, OLD, tmp_path / "old")
    bare = start(redis_url, redis_ns, key, (), tmp_path / "bare", extra=("--allow-no-tasks",))
    try:
        assert wait_until(lambda: alive(store) == 3, 30), "replicas not up"
        with Client(redis_url, namespace=redis_ns) as client:
            jobs = enqueue_mix(client, 2000, seed=1)
            execs = f"{key}:execs"
            assert wait_until(lambda: redis_client.hlen(execs) >= 2000, 60), redis_client.hlen(
                execs
            )
        log = witness_log(redis_client, key)
        counts = Counter(e["job"] for e in log)
        assert set(counts) == set(jobs) and set(counts.values()) == {1}  # each once
        assert {e["attempt"] for e in log} == {1}  # no attempt burnt on a replica without it
        by_pid = {new.pids[0]: NEW, old.pids[0]: OLD}
        for e in log:  # on a replica that has the task; never on the bare one
            assert e["pid"] in by_pid, e
            assert jobs[e["job"]] != "witness.new" or e["pid"] == new.pids[0], e
        assert {e["pid"] for e in log} == set(by_pid)  # both took part
        stats = client_stats(store)
        assert stats["counters"].get("failed", 0) == 0 and stats["waiting"] == {}
    finally:
        for f in (bare, old, new):
            f.stop()
        store.close()


def test_a_task_no_live_replica_serves_waits_visibly_and_runs_when_one_starts(
    redis_url, redis_ns, redis_client, tmp_path
):
    key = f"w{uuid.uuid4().hex[:8]}"
    store = RedisStore(redis_url, redis_ns)
    old = start(redis_url, redis_ns, key, OLD, tmp_path / "old")
    new = None
    try:
        assert wait_until(lambda: alive(store) == 1, 30), "replica not up"
        with Client(redis_url, namespace=redis_ns) as client:
            waiting = [client.enqueue("witness.new", job_id=f"n{i}") for i in range(50)]
            client.enqueue("witness.hit", job_id="h")
        assert wait_until(lambda: fleet.waiting(store) == {"witness.new": 50}, 30), fleet.waiting(
            store
        )
        assert wait_until(lambda: any(e["job"] == "h" for e in witness_log(redis_client, key)), 30)
        assert not any(e["job"] in waiting for e in witness_log(redis_client, key))
        info = store.get("n0")
        assert info is not None and info.state == "scheduled" and info.failures == 0
        assert info.attempts == 0 and info.dead_letters == ()
        # every readout says why, and what the live replica serves
        for args in (["stats"], ["show", "n0"], ["ls"]):
            out = duetime(*args, "--redis", redis_url, "-n", redis_ns)
            assert "no live replica serves task 'witness.new'" in out, (args, out)
        enqueue = ["enqueue", "witness.new", "--id", "n50", "--redis", redis_url, "-n", redis_ns]
        note = run_cli(*enqueue).stderr
        assert "note: no live replica serves task 'witness.new'" in note, note
        enqueue = [
            "enqueue",
            "witness.hit",
            "--lane",
            "nosuch",
            "--redis",
            redis_url,
            "-n",
            redis_ns,
        ]
        note = run_cli(*enqueue).stderr  # a lane no live replica runs says so too
        assert "note: no live replica runs lane 'nosuch'" in note, note
        assert "run --lane" not in run_cli(*enqueue[:2], *enqueue[4:]).stderr  # its own lane
        waiting.append("n50")
        new = start(redis_url, redis_ns, key, NEW, tmp_path / "new")
        assert wait_until(
            lambda: sum(1 for e in witness_log(redis_client, key) if e["job"] in waiting) >= 51, 30
        )
        log = [e for e in witness_log(redis_client, key) if e["job"] in waiting]
        assert sorted(e["job"] for e in log) == sorted(waiting)  # each once
        assert {e["attempt"] for e in log} == {1} and {e["pid"] for e in log} == set(new.pids)
        assert fleet.waiting(store) == {}
    finally:
        old.stop()
        if new is not None:
            new.stop()
        store.close()


def client_stats(store: RedisStore):
    from scheduler.stores.redis.reading import queries

    return queries.stats(store)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [sys.executable, "-m", "scheduler", *args], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out


def duetime(*args: str) -> str:
    return run_cli(*args).stdout
