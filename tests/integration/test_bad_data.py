"""Malformed data found in Redis is quarantined with a reason; the loop goes on
(docs/reliability.md).

The quarantine (lua/README.md): a record in the namespace's ``quarantined`` hash, the job
key renamed to ``quarantined:<job>`` as it was, one ``quarantined`` event."""

from __future__ import annotations

import json

import pytest

from scheduler.model import After
from scheduler.stores.redis import RedisStore
from tests.helpers import spec

pytestmark = pytest.mark.redis


def quarantined(store: RedisStore, client, job: str) -> dict:
    """The quarantine record of ``job``, checked: moved aside whole, counted once."""
    record = json.loads(client.hget(store.keys.quarantined, job))
    assert record["id"] == record["job"] == job and record["by"] == "claim"
    assert not client.exists(store.keys.job(job))  # moved aside as it was
    assert client.type(store.keys.quarantined_data(job)) == b"hash"
    kinds = [e.kind for e in store.events(1000) if e.job_id == job]
    assert kinds.count("quarantined") == 1 and "failed" not in kinds
    return record


def test_a_job_hash_with_a_corrupt_definition_is_moved_aside_not_fatal(
    redis_url, redis_ns, redis_client, clock
):
    store = RedisStore(redis_url, redis_ns, clock=clock)
    store.add(spec("bad", After(0)))
    store.add(spec("good", After(0)))
    redis_client.hset(store.keys.job("bad"), "def", "{not json")
    batch = store.claim_due({"default": 10}, 30, "o")
    assert [c.job_id for c in batch.claims] == ["good"]
    record = quarantined(store, redis_client, "bad")
    assert record["reason"].startswith("malformed job data in Redis (JSONDecodeError")
    assert record["token"] and record["running"].endswith("|bad")  # the claim, dropped
    assert redis_client.zcard(store.keys.lease) == 1  # the good claim's only
    assert store.get("bad") is None
    store.close()


def test_arguments_nested_deeper_than_python_parses_are_moved_aside_at_claim(
    redis_url, redis_ns, redis_client, clock
):
    """Arguments nested 50,000 levels deep (stored by hand, or by a Python whose JSON
    parses deeper than this one's: 3.13 parses ~10,000 levels, 3.10-3.12 ~1,000) made
    the claim's decoding raise RecursionError: the whole claim round failed, again at
    every retry, for every job of the batch."""
    store = RedisStore(redis_url, redis_ns, clock=clock)
    store.add(spec("bad", After(0)))
    store.add(spec("good", After(0)))
    definition = json.loads(redis_client.hget(store.keys.job("bad"), "def"))
    definition["a"] = '{"a":' * 50_000 + "1" + "}" * 50_000
    redis_client.hset(store.keys.job("bad"), "def", json.dumps(definition))
    batch = store.claim_due({"default": 10}, 30, "o")
    assert [c.job_id for c in batch.claims] == ["good"]
    record = quarantined(store, redis_client, "bad")
    assert "nested too deeply" in record["reason"]
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
    record = quarantined(store, redis_client, "bad")
    assert "malformed job data" in record["reason"] and "lease" not in record["reason"]
    assert redis_client.zcard(store.keys.lease) == 1  # the good claim's only
    store.close()
