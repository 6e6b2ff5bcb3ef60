"""The store contract suite (tests/contract/test_store.py) on Redis Cluster and on shards:
a ``RedisStore`` on a ``redis+cluster://`` URL (one shard, every script routed by its
KEYS[1]), and a ``ShardedStore`` of 8 shards on the cluster and on one Redis. The local
cluster has three masters (tests/cluster_fixtures.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler.model import After
from scheduler.stores.redis.sharding.sharded import open_store
from tests.contract.test_store import *  # noqa: F403  (every contract test, re-run here)
from tests.contract.test_store import claim, ids
from tests.helpers import spec

pytestmark = [pytest.mark.redis]

KINDS = ["cluster", "cluster-8-shards", "redis-8-shards"]


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, clock, redis_ns) -> Iterator[object]:  # noqa: F811
    """Overrides conftest's ``store``: the cluster and sharded kinds."""
    if request.param.startswith("cluster"):
        url = request.getfixturevalue("shared_redis_cluster").url
    else:
        url = request.getfixturevalue("redis_url")
    shards = 8 if request.param.endswith("8-shards") else 1
    s = open_store(url, redis_ns, clock=clock, shards=shards)
    yield s
    s.close()


# Contract tests that hold per shard only (docs/cluster.md): equal due
# times are claimed in submission order within a shard, and fences increase per shard
# (so per job, which is what fencing needs), not across shards. Their sharded
# counterparts follow.
PER_SHARD_ONLY = {
    "test_equal_due_times_are_claimed_in_submission_order",
    "test_claims_are_bounded_by_capacity_and_report_more_due",
    "test_fences_strictly_increase",
}


@pytest.fixture(autouse=True)
def _per_shard_only(request: pytest.FixtureRequest) -> None:
    kind = getattr(getattr(request.node, "callspec", None), "params", {}).get("store", "")
    if request.node.originalname in PER_SHARD_ONLY and kind.endswith("-shards"):
        pytest.skip("holds per shard only; see the sharded variant below")


def _sharded(store) -> bool:  # noqa: ANN001
    return len(getattr(store, "shards", [])) > 1


def test_sharded_claims_are_bounded_by_capacity_fifo_per_shard_and_fenced_per_shard(store, clock):  # noqa: F811
    if not _sharded(store):
        pytest.skip("a sharded store's variant")
    names = [f"j{i}" for i in range(40)]
    for name in names:
        store.add(spec(name, After(0)))
    first = claim(store, {"default": 15})
    assert len(first.claims) == 15 and first.next_due_in is None  # the lane is full
    rest = claim(store, {"default": 100})
    got = first.claims + rest.claims
    assert sorted(ids(first) + ids(rest)) == sorted(names)  # each exactly once
    for shard in range(len(store.shards)):
        mine = [c for c in got if store.shards.index(store.shard(c.job_id)) == shard]
        in_shard = [n for n in names if store.shard(n) is store.shards[shard]]
        claimed = [c.job_id for c in sorted(mine, key=lambda c: c.fence)]
        assert claimed == [n for n in in_shard if n in claimed]  # FIFO within the shard
        assert len({c.fence for c in mine}) == len(mine)  # fences unique per shard
