"""Replicas as real processes on a real local Redis Cluster (three masters), with the
namespace in 8 shards: every invocation runs exactly once and recurring jobs stay on their
grid (the cluster twin of test_replicas.py). Executions are counted by an independent
witness on the session's plain Redis, not by the cluster under test."""

from __future__ import annotations

import random
import uuid

import pytest

from scheduler import Client
from scheduler.stores.redis.protocol import urls
from tests.faults.fleet import replicas, wait_until, witness_log

pytestmark = [pytest.mark.redis, pytest.mark.slow]

SHARDS = 8


def alive(cluster_client, ns: str) -> int:
    """Replicas with a live ``replica:<id>`` key in any shard of ``ns``."""
    owners = {
        k.rsplit(":", 1)[1] for k in cluster_client.scan_iter(match=f"duetime:{{{ns}*}}:replica:*")
    }
    return len(owners)


def test_three_replicas_on_a_cluster_run_each_invocation_exactly_once(
    shared_redis_cluster, redis_url, redis_ns, redis_client, tmp_path
):  # noqa: F811
    url = f"{shared_redis_cluster.url}/?shards={SHARDS}"
    key = f"w{uuid.uuid4().hex[:8]}"
    rng = random.Random(1)
    cluster = urls.connect(shared_redis_cluster.url, decode_responses=True)
    with (
        replicas(
            url,
            redis_ns,
            key,
            count=3,
            workers=4,
            lease=5,
            resync=1,
            log_dir=tmp_path,
            witness_url=redis_url,
        ) as fleet,
        Client(url, namespace=redis_ns) as client,
    ):
        assert wait_until(lambda: alive(cluster, redis_ns) == 3, 30), "replicas not up"
        once = client.enqueue_many(
            {"task": "witness.hit", "delay": 0.5 + 4 * rng.random()} for _ in range(2000)
        )
        recurring = [client.enqueue("witness.hit", every=0.2, job_id=f"rec{i}") for i in range(5)]
        shards = {  # (a closed client refuses even this: read it while open)
            client.store.shards.index(client.store.shard(j))  # type: ignore[attr-defined]
            for j in once
        }
        execs = f"{key}:execs"

        def one_offs_done() -> int:
            return sum(1 for k in redis_client.hkeys(execs) if not k.startswith(b"rec"))

        assert wait_until(lambda: one_offs_done() == 2000, 30), one_offs_done()
        for job_id in recurring:
            assert client.cancel(job_id) is True
        codes = fleet.stop()
    cluster.close()
    assert codes == [0, 0, 0]  # graceful SIGTERM exit

    counts = {k.decode(): int(v) for k, v in redis_client.hgetall(execs).items()}
    assert all(n == 1 for n in counts.values()), "an invocation ran twice"
    assert {inv.split("@")[0] for inv in counts if not inv.startswith("rec")} == set(once)
    log = witness_log(redis_client, key)
    assert shards == set(range(SHARDS))  # every shard took part
    for job_id in recurring:
        scheds = sorted(e["sched"] for e in log if e["job"] == job_id)
        assert len(scheds) >= 15, (job_id, len(scheds))  # ~4 s at 200 ms
        steps = {b - a for a, b in zip(scheds, scheds[1:], strict=False)}
        assert steps == {200}, (job_id, sorted(steps))  # on the grid, none missed
        assert len(set(scheds)) == len(scheds)  # none twice
    assert len({e["pid"] for e in log}) == 3  # all took part
