"""The store contract suite (tests/contract/test_store.py) through a Sentinel URL: a
RedisStore on ``redis+sentinel://`` behaves exactly as on ``redis://`` (no failover here;
see test_failover.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler.stores.redis import RedisStore
from tests.contract.test_store import *  # noqa: F403  (every contract test, re-run here)
from tests.sentinel_fixtures import SentinelCluster, shared_sentinel_cluster  # noqa: F401

pytestmark = [pytest.mark.redis]


@pytest.fixture
def store(shared_sentinel_cluster: SentinelCluster, clock, redis_ns) -> Iterator[RedisStore]:  # noqa: F811
    """Overrides conftest's ``store``: one kind only, a RedisStore on the Sentinel URL."""
    s = RedisStore(shared_sentinel_cluster.url, redis_ns, clock=clock)
    yield s
    s.close()


def test_the_store_is_on_the_primary_the_sentinels_name(shared_sentinel_cluster, store):  # noqa: F811
    store.check_server()
    store.claim_due({"default": 1}, 30, "o")
    assert store.redis.info("replication")["role"] == "master"
    assert store.replication.primary == shared_sentinel_cluster.primary_address()
    assert store.replication.failovers == 0
    assert "redis+sentinel://" in store.url
