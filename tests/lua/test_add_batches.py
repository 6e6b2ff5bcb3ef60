"""add.lua with several jobs per call (``RedisStore.add_many``, stores/redis/adds.py): it
leaves the namespace exactly as the same adds made one call each would, refuses bad input
of any job before its first write, and gives a job whose old data blocks it its own error
while the others are written."""

from __future__ import annotations

import pytest
import redis

from scheduler.model import After, At, Cron, Delivery, Every, Overlap, RetryPolicy
from scheduler.stores.redis import RedisStore, StoreCorruptError, StoreFullError
from scheduler.stores.redis.adds import ADD_BATCH
from scheduler.testing import FakeClock
from tests.conftest import START
from tests.helpers import spec
from tests.lua.test_scripts import add_args, attempt, changed, dump, entries

pytestmark = pytest.mark.redis


def batch(include_repeats: bool = True):  # type: ignore[no-untyped-def]
    """Jobs of every kind and option, and (``include_repeats``) the same ids again: equal
    (unchanged) and changed (replaced)."""
    jobs = [
        spec("a", After(0)),
        spec("b", After(5), lane="fast"),
        spec("c", At(START + 10)),
        spec("d", At(START - 10)),  # in the past: due now, "ready" recorded
        spec("e", Every(60)),
        spec("f", Every(0.5, anchor=START - 7), overlap=Overlap.ALLOW),
        spec("g", Cron("*/5 * * * *", "UTC")),
        spec("h", After(1), delivery=Delivery.AT_MOST_ONCE, retry=RetryPolicy(max_stalls=1)),
        spec("i", Every(30), catch_up_window=90.0, misfire_grace=2.0),
    ]
    if include_repeats:
        jobs += [spec("a", After(0)), spec("e", Every(90)), spec("c", At(START + 10))]
    return jobs


def stripped(client: redis.Redis, rs: RedisStore) -> dict:
    """The namespace's keys without its prefix, streams as their entries' fields."""
    out = {}
    for key, (kind, value, ttl) in dump(client, rs.keys.prefix).items():
        if kind == b"stream":
            value = entries(client, rs)
        if key.endswith(":epoch"):
            continue
        out[key.removeprefix(rs.keys.prefix)] = (kind, value, ttl)
    return out


def test_a_batch_leaves_what_the_same_adds_one_call_each_leave(
    redis_url, redis_ns, redis_client, clock
):
    one = RedisStore(redis_url, f"one{redis_ns}", clock=clock)
    many = RedisStore(redis_url, f"many{redis_ns}", clock=clock)
    try:
        singles = [one.add(s) for s in batch()]
        batched = many.add_many(batch())
        assert batched == singles
        assert [r.outcome for r in batched[-3:]] == ["unchanged", "replaced", "unchanged"]
        assert stripped(redis_client, many) == stripped(redis_client, one)
        assert redis_client.smembers(many.keys.lanes) == {b"default", b"fast"}
    finally:
        one.close()
        many.close()


def test_calls_of_up_to_add_batch_jobs_keep_fifo_order(redis_url, redis_ns, redis_client, clock):
    rs = RedisStore(redis_url, redis_ns, clock=clock)
    try:
        n = 2 * ADD_BATCH + 1  # two full calls and a lone job
        results = rs.add_many([spec(f"j{i:03}", At(START)) for i in range(n)])
        assert [r.outcome for r in results] == ["created"] * n
        members = [m.decode() for m in redis_client.zrange(rs.keys.due("default"), 0, -1)]
        assert [m.split("|", 2)[2] for m in members] == [f"j{i:03}" for i in range(n)]
        assert rs.replication.seq_high == n
        assert int(redis_client.hget(rs.keys.stats, "scheduled")) == n
    finally:
        rs.close()


def test_bad_input_of_any_job_refuses_the_whole_call(redis_url, redis_ns, redis_client, clock):
    rs = RedisStore(redis_url, redis_ns, clock=clock)
    try:
        rs.add(spec("old", After(0)))
        before = dump(redis_client, rs.keys.prefix)
        good = [*add_args(job="x1"), ""]
        bad = [*add_args(job="x2", misfire="sometimes"), ""]
        assert attempt(rs, "add", *good, *bad) == "ERROR: duetime bad-input policy"
        assert attempt(rs, "add", *good, *good[:6]) == "ERROR: duetime bad-input count"
        assert attempt(rs, "add", *good, *good, "x") == "ERROR: duetime bad-input count"
        assert changed(before, dump(redis_client, rs.keys.prefix)) == []
    finally:
        rs.close()


def test_a_job_whose_old_data_blocks_it_gets_its_own_error(redis_url, redis_ns, redis_client):
    clock = FakeClock(START)
    rs = RedisStore(redis_url, redis_ns, clock=clock)
    try:
        # job:bad does not parse, and quarantined:bad holds an earlier item: add refuses it
        redis_client.set(rs.keys.job("bad"), b"planted by hand")
        redis_client.set(rs.keys.prefix + "quarantined:bad", b"an earlier item")
        with pytest.raises(StoreCorruptError, match="quarantined:bad holds an earlier item"):
            rs.add_many([spec("a", After(0)), spec("bad", After(0)), spec("c", After(0))])
        assert redis_client.get(rs.keys.job("bad")) == b"planted by hand"
        assert rs.get("a") is not None and rs.get("c") is not None
        assert rs.replication.seq_high == 2  # the lost-write check saw the two writes
    finally:
        rs.close()


def test_an_out_of_memory_redis_refuses_adds_as_store_full(private_redis, clock):
    """add.lua is a #!lua script: Redis at maxmemory (noeviction) refuses it whole, one job
    or many per call, and the store says so (StoreFullError), nothing written."""
    rs = RedisStore(private_redis.url, "oom", clock=clock)
    try:
        rs.add(spec("before", After(0)))
        r = redis.Redis.from_url(private_redis.url)
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", max(1, int(r.info("memory")["used_memory"]) - 1024))
        with pytest.raises(StoreFullError, match="out of memory"):
            rs.add(spec("one", After(0)))
        with pytest.raises(StoreFullError, match="out of memory"):
            rs.add_many([spec(f"m{i}", After(0)) for i in range(3)])
        r.config_set("maxmemory", 0)
        assert [rs.get(j) is None for j in ("one", "m0", "m1", "m2")] == [True] * 4
        r.close()
    finally:
        rs.close()
