"""The namespace's count of live jobs (stats `live`, lua/README.md): every script that makes
a job live or ends it keeps the count, so that ``duetime doctor`` (the reconciler's full
scan) finds exactly as many live jobs as were counted, and names the difference lost."""

from __future__ import annotations

import pytest

from scheduler.model import After, Commit, Delivery, Every
from scheduler.stores.redis import StoreCorruptError, redo
from scheduler.stores.redis.sharding.sharded import ShardedStore
from tests.helpers import spec, write_job_field
from tests.lua.corruption import dump

pytestmark = pytest.mark.redis


def count(rs) -> tuple[int | None, int, int | None]:
    done = rs.reconcile()
    return done.live_counted, done.live_found, done.lost


def test_every_path_that_starts_or_ends_a_job_keeps_the_count(rs, redis_client):
    for j in "abcdefgh":
        rs.add(spec(j, After(0)))
    rs.add(spec("tick", Every(60)))
    rs.add(spec("later", After(3600)))
    rs.add(spec("later", After(3600)))  # unchanged
    rs.add(spec("later", After(7200)))  # replaced: still one job
    assert count(rs) == (10, 10, 0)

    by = {c.job_id: c for c in rs.claim_due({"default": 20}, 30, "o").claims}
    assert set(by) == set("abcdefgh")
    assert rs.complete(by["a"], None) == Commit.OK  # retired: succeeded
    assert rs.complete_many([(by["b"], None), (by["c"], None)]) == [Commit.OK, Commit.OK]
    assert rs.fail(by["d"], "boom", None) == Commit.OK  # dead letter: retired, failed
    assert rs.release(by["e"]) == Commit.OK  # due again: live
    rs.cancel("f")  # cancelled while it runs (nothing prevented): retired when the run ends
    assert count(rs) == (6, 6, 0)
    rs.complete(by["f"], None)
    assert rs.cancel("later")  # nothing runs: retired at once
    assert redo.delete(rs, "g")  # deleted while it runs; its commit finds no job
    assert rs.complete(by["g"], None) == Commit.NOT_FOUND
    assert count(rs) == (3, 3, 0)  # e, h, tick

    assert redo.retry(rs, "d").queued == 1  # live again
    rs.add(spec("a", After(0)))  # a retired job enqueued again: created
    assert count(rs) == (5, 5, 0)

    # moved aside (its data does not parse), then put back
    write_job_field(redis_client, rs.keys.job("e"), "retries", "garbage")
    assert not rs.cancel("e")
    assert count(rs) == (4, 4, 0)
    write_job_field(redis_client, rs.keys.quarantined_data("e"), "retries", "0")
    assert rs.restore("e") == "restored"
    assert count(rs) == (5, 5, 0)

    # an at-most-once job whose run was issued but never recorded: abandoned by doctor
    rs.add(spec("once", After(0), delivery=Delivery.AT_MOST_ONCE))
    claimed = [c for c in rs.claim_due({"default": 20}, 30, "o").claims if c.job_id == "once"]
    redis_client.hdel(rs.keys.running, claimed[0].token)
    done = rs.reconcile()
    assert [f.action for f in done.findings if f.job_id == "once"] == ["abandoned"]
    assert (done.live_counted, done.live_found, done.lost) == (6, 5, 0)  # ended by this scan
    assert count(rs) == (5, 5, 0)

    # a job key gone without duetime (what an eviction does): lost
    redis_client.delete(rs.keys.job("tick"))
    assert count(rs) == (5, 4, 1)


def test_a_namespace_without_a_count_says_unknown_and_doctor_starts_one(rs, redis_client):
    for j in "abc":
        rs.add(spec(j, After(3600)))
    redis_client.hdel(rs.keys.stats, "live", "live_since")  # as before the count existed
    rs.add(spec("d", After(3600)))  # counted from a baseline of nothing: not trusted
    assert count(rs) == (None, 4, None)
    done = rs.reconcile(dry_run=True, start_count=True)  # a dry run writes nothing
    assert done.live_counted is None and not done.started
    done = rs.reconcile(start_count=True)
    assert (done.started, done.live_counted, done.lost) == (1, 4, 0)
    rs.add(spec("e", After(3600)))
    redis_client.delete(rs.keys.job("a"))
    assert count(rs) == (5, 4, 1)


def test_the_count_of_a_new_namespace_is_not_restarted_by_a_lost_seq(rs, redis_client):
    """add.lua starts the count only in a new namespace (no seq, no layout, nothing due):
    a namespace whose stats and seq keys were evicted keeps an unknown count."""
    rs.add(spec("a", After(3600)))
    redis_client.delete(rs.keys.stats, rs.keys.prefix + "seq")
    rs.add(spec("b", After(3600)))
    assert count(rs) == (None, 2, None)


def test_a_live_count_that_is_not_an_integer_stops_the_scripts(rs, redis_client):
    rs.add(spec("a", After(0)))
    redis_client.hset(rs.keys.stats, "live", "many")
    before = dump(redis_client, rs.keys.prefix)
    for call in (lambda: rs.add(spec("b", After(0))), lambda: rs.cancel("a")):
        with pytest.raises(StoreCorruptError) as err:
            call()
        assert err.value.key == rs.keys.stats and "field live is not an integer" in str(err.value)
    assert dump(redis_client, rs.keys.prefix) == before
    with pytest.raises(StoreCorruptError):
        rs.check_server()


def test_a_sharded_namespace_counts_per_shard_and_sums(redis_url, redis_ns, redis_client, clock):
    store = ShardedStore(redis_url, redis_ns, shards=4, clock=clock)
    try:
        store.add_many([spec(f"j{i}", After(3600)) for i in range(40)])
        assert {int(redis_client.hget(s.keys.stats, "live") or 0) for s in store.shards} != {40}
        done = store.reconcile()
        assert (done.live_counted, done.live_found, done.lost, done.uncounted) == (40, 40, 0, 0)
        for i in range(3):
            redis_client.delete(store.shard(f"j{i}").keys.job(f"j{i}"))
        redis_client.hdel(store.shards[3].keys.stats, "live_since")
        done = store.reconcile()
        lost_elsewhere = sum(1 for i in range(3) if store.shard(f"j{i}") is not store.shards[3])
        assert done.live_counted is None and done.uncounted == 1
        assert done.lost == lost_elsewhere  # the shards with a count
    finally:
        store.close()
