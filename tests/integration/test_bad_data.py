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


@pytest.mark.parametrize(
    "args", ['"{not json"', '"[1, 2]"', '"7"', '"\\"text\\""', "[1]", "{}"], ids=repr
)
def test_arguments_that_are_not_a_json_object_are_moved_aside_at_claim(
    redis_url, redis_ns, redis_client, clock, args
):
    """Issue 12: a valid definition whose arguments are not a JSON object used to be
    claimed, then fail outside the runner's guard; its lease lapsed three times and it
    was dead-lettered as "lease lost" (90 s at the default lease)."""
    import json

    store = RedisStore(redis_url, redis_ns, clock=clock)
    store.add(spec("bad", After(0)))
    store.add(spec("good", After(0)))
    definition = json.loads(redis_client.hget(store.keys.job("bad"), "def"))
    definition["a"] = json.loads(args)
    redis_client.hset(store.keys.job("bad"), "def", json.dumps(definition))
    batch = store.claim_due({"default": 10}, 30, "o")
    assert [c.job_id for c in batch.claims] == ["good"]
    info = store.get("bad")
    assert info is not None and info.state == "failed"
    assert "malformed job data" in (info.last_error or "")
    assert "lease" not in (info.last_error or "")
    assert redis_client.zcard(store.keys.lease) == 1  # the good claim's only
    store.close()
