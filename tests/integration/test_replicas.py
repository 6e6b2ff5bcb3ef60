"""Replicas as real processes against a real redis-server (the delivery contract,
docs/shared-mode.md).
Kills, pauses and clock skew are in tests/faults (the fault harness).

Executions are counted by an independent witness (tests/faults/witness.py), not
by the store under test.
"""

from __future__ import annotations

import random
import uuid

import pytest

from scheduler import Client
from tests.faults.fleet import replicas, wait_until, witness_log

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def alive(client, ns: str) -> int:
    return len(client.keys(f"duetime:{{{ns}}}:replica:*"))


def test_three_replicas_run_each_invocation_exactly_once(
    redis_url, redis_ns, redis_client, tmp_path
):
    key = f"w{uuid.uuid4().hex[:8]}"
    rng = random.Random(1)
    with (
        replicas(
            redis_url, redis_ns, key, count=3, workers=4, lease=5, resync=1, log_dir=tmp_path
        ) as fleet,
        Client(redis_url, namespace=redis_ns) as client,
    ):
        assert wait_until(lambda: alive(redis_client, redis_ns) == 3, 30), "replicas not up"
        once = [client.enqueue("witness.hit", delay=0.5 + 5 * rng.random()) for _ in range(3000)]
        recurring = [client.enqueue("witness.hit", every=0.2, job_id=f"rec{i}") for i in range(5)]
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
        assert len(scheds) >= 20, (job_id, len(scheds))  # ~5 s at 200 ms
        steps = {b - a for a, b in zip(scheds, scheds[1:], strict=False)}
        assert steps == {200}, (job_id, sorted(steps))  # on the grid, none missed
        assert len(set(scheds)) == len(scheds)  # none twice
    assert {e["pid"] for e in log} and len({e["pid"] for e in log}) == 3  # all took part
