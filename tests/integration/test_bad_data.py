"""Malformed data found in Redis is quarantined with a reason; the loop goes on (SPEC §5)."""

from __future__ import annotations

import pytest

from scheduler.model import After
from scheduler.stores.redis import RedisStore
from tests.helpers import spec

pytestmark = pytest.mark.redis


def test_a_job_hash_with_a_corrupt_definition_is_failed_not_fatal(
    redis_url, redis_ns, redis_client, clock
):
    store = RedisStore(redis_url, redis_ns, clock=clock)
    store.add(spec("bad", After(0)))
    store.add(spec("good", After(0)))
    redis_client.hset(store.keys.job("bad"), "def", "{not json")
    batch = store.claim_due({"default": 10}, 30, "o")
    assert [c.job_id for c in batch.claims] == ["good"]
    info = redis_client.hgetall(store.keys.job("bad"))
    assert info[b"state"] == b"failed"
    assert b"malformed job data" in info[b"last_error"]
    assert redis_client.lrange(store.keys.dead("bad"), 0, -1)
    assert "malformed" in store.get("bad").dead_letters[0].detail
    store.close()
