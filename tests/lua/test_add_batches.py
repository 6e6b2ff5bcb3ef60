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
from tests.lua.test_scripts import add_args, attempt, changed, dump, entries, events

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
    """The namespace's keys without its prefix, streams as their events (each entry
    expanded through the store's one parser), sorted: a batch call writes its `scheduled`
    events as one entry when it ends, after any event of its written at once."""
    out = {}
    for key, (kind, value, ttl) in dump(client, rs.keys.prefix).items():
        if kind == b"stream":
            value = sorted(events(client, rs), key=lambda e: sorted(e.items()))
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
        # one call: its 9 created jobs in one entry (no attempt), the replaced one alone
        assert len(entries(redis_client, one)) == 10  # 2 of the 12 adds are unchanged
        rows = entries(redis_client, many)
        assert [(r["kind"], r["detail"], r.get("n")) for r in rows] == [
            ("scheduled", "replaced", None),
            ("scheduled", "created", "9"),
        ]
        assert rows[1]["batch"].split("\n")[0] == f"{round(START * 1000)}|||a"
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
        assert attempt(rs, "add", *good, *good, "x", "y") == "ERROR: duetime bad-input count"
        # 12n + 1 arguments: the last is the key rules' stamp, checked ("0": never changed)
        assert attempt(rs, "add", *good, *good, "x") == "ERROR: duetime stale-rules 0"
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


def wakes(client: redis.Redis, rs: RedisStore, add) -> list[int]:  # type: ignore[no-untyped-def]
    """The wake-ups (due ms) that ``add()`` published on the namespace's channel."""
    sub = client.pubsub(ignore_subscribe_messages=True)
    sub.subscribe(rs.keys.wake)
    try:
        assert sub.get_message(timeout=1) is None  # subscribed
        add()
        out = []
        while (m := sub.get_message(timeout=0.2)) is not None:
            out.append(int(m["data"]))
        return out
    finally:
        sub.close()


def test_a_batch_wakes_the_lanes_as_one_call_per_job_would(redis_url, redis_ns, redis_client):
    """add.lua tells whether a new member heads its lane from the head it read while
    checking the due set, asking again after a tie or after it removed the head (a
    replaced job's occurrence): the same wake-ups as one call per job, in order."""
    base = round(START * 1000)
    jobs = [
        spec("x", At(START + 0.1)),  # an empty lane: wakes
        spec("y", At(START + 0.2)),  # later than the head
        spec("z", At(START + 0.05)),  # the new head: wakes
        spec("z", At(START + 0.3)),  # replaced: its old occurrence, the head, removed
        spec("u", At(START + 0.06)),  # before x, the head now: wakes
        spec("t", At(START + 0.06)),  # a tie with the head (an earlier member): no wake
        spec("s", At(START + 0.07)),  # later than the head
        spec("v", At(START + 0.01)),  # the new head: wakes
        spec("w", At(START + 0.4), lane="fast"),  # another lane, empty: wakes
    ]
    clock = FakeClock(START)
    one = RedisStore(redis_url, f"one{redis_ns}", clock=clock)
    many = RedisStore(redis_url, f"many{redis_ns}", clock=clock)
    try:
        want = [base + 100, base + 50, base + 60, base + 10, base + 400]
        assert wakes(redis_client, one, lambda: [one.add(s) for s in jobs]) == want
        assert wakes(redis_client, many, lambda: many.add_many(jobs)) == want
        head = redis_client.zrange(many.keys.due("default"), 0, 0, withscores=True)
        assert head[0][0].decode().endswith("|s|v")
    finally:
        one.close()
        many.close()
