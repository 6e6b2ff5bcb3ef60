"""A sharded namespace (scheduler/stores/redis/sharding/sharded.py) on one real Redis: the
fixed shard count, routing by job id, and claims that visit only shards that may have due
work (a wake-up costs one shard call, not N)."""

from __future__ import annotations

import threading
import time

import pytest

from scheduler.errors import ShardCountError
from scheduler.model import After
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.sharding.rounds import SHARD_RETRY
from scheduler.stores.redis.sharding.sharded import ShardedStore, open_store
from tests.helpers import spec

pytestmark = [pytest.mark.redis]

ALL = {"default": 100}


class CountingShards:
    """Counts claim calls per shard of a ShardedStore."""

    def __init__(self, store: ShardedStore) -> None:
        self.calls = [0] * store.n
        for i, shard in enumerate(store.shards):
            shard.claim_due = self._wrap(i, shard.claim_due)  # type: ignore[method-assign]

    def _wrap(self, i, fn):  # noqa: ANN001, ANN202
        def counted(*args, **kw):  # noqa: ANN002, ANN003, ANN202
            self.calls[i] += 1
            return fn(*args, **kw)

        return counted

    def take(self) -> list[int]:
        calls, self.calls = self.calls, [0] * len(self.calls)
        return calls


def test_open_store_picks_the_kind_from_the_shard_count(redis_url, redis_ns):
    one = open_store(redis_url, redis_ns)
    four = open_store(redis_url + "?shards=4", redis_ns)
    try:
        assert isinstance(one, RedisStore)
        assert isinstance(four, ShardedStore) and four.n == 4
        with pytest.raises(ValueError, match="two shard counts"):
            open_store(redis_url + "?shards=4", redis_ns, shards=8)
    finally:
        one.close()
        four.close()


def test_the_shard_count_of_a_namespace_never_changes(redis_url, redis_ns, clock):
    four = ShardedStore(redis_url, redis_ns, shards=4, clock=clock)
    eight = ShardedStore(redis_url, redis_ns, shards=8, clock=clock)
    one = RedisStore(redis_url, redis_ns, clock=clock)
    try:
        four.add(spec("a", After(1)))
        with pytest.raises(ShardCountError, match="has 4 shard\\(s\\).*--shards 4"):
            eight.add(spec("b", After(1)))
        with pytest.raises(ShardCountError, match="has 4 shard"):
            one.check_server()
        four.check_server()  # the same count: fine
    finally:
        for s in (four, eight, one):
            s.close()


def test_a_producer_without_the_shard_count_is_refused_before_it_writes(
    redis_url, redis_ns, clock, redis_client
):
    """A stranger's fleet: ``duetime enqueue`` (and ``Client.enqueue``) without --shards
    into a namespace of 4 shards wrote the job into shard 0, where `show` and `cancel`
    (which look where its id hashes) did not find it, and an upsert with --shards 4 made a
    second copy of it that ran too."""
    from click.testing import CliRunner

    from scheduler import Client
    from scheduler.cli import main

    four = ShardedStore(redis_url, redis_ns, shards=4, clock=clock)
    four.add(spec("a", After(60)))
    keys_before = set(redis_client.scan_iter(match=f"duetime:{{{redis_ns}*"))
    with (
        pytest.raises(ShardCountError, match="has 4 shard"),
        Client(redis_url, namespace=redis_ns) as c,
    ):
        c.enqueue("t.x", delay=60, job_id="q5")
    with pytest.raises(ShardCountError, match="has 4 shard"):
        RedisStore(redis_url, redis_ns).add_many([spec("q6", After(60))])
    argv = ["enqueue", "t.x", "--in", "1h", "--id", "q7", "--redis", redis_url, "-n", redis_ns]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 1 and "has 4 shard(s)" in result.output, result.output
    assert set(redis_client.scan_iter(match=f"duetime:{{{redis_ns}*")) == keys_before  # nothing
    four.close()


def test_an_unsharded_namespace_with_data_counts_as_one_shard(redis_url, redis_ns, clock):
    one = RedisStore(redis_url, redis_ns, clock=clock)
    four = ShardedStore(redis_url, redis_ns, shards=4, clock=clock)
    try:
        one.add(spec("a", After(1)))
        one.check_server()
        with pytest.raises(ShardCountError, match="has 1 shard"):
            four.check_server()
    finally:
        one.close()
        four.close()


def test_jobs_are_routed_by_id_and_merged_for_inspection(redis_url, redis_ns, clock, redis_client):
    store = ShardedStore(redis_url, redis_ns, shards=4, clock=clock)
    try:
        names = [f"j{i}" for i in range(20)]
        for n, name in enumerate(names):
            store.add(spec(name, After(1 + n)))
        for name in names:
            i = store.shards.index(store.shard(name))
            tag = redis_ns if i == 0 else f"{redis_ns}#{i}"
            assert redis_client.exists(f"duetime:{{{tag}}}:job:{name}")
        assert {s.keys.prefix for s in store.shards if s.jobs()} == {
            s.keys.prefix for s in store.shards
        }  # every shard holds some
        assert [i.job_id for i in store.jobs()] == names  # merged, by next run
        assert store.cancel("j3") and store.get("j3").state == "cancelled"
        assert [e.job_id for e in store.events(100)].count("j3") >= 1
        assert store.next_id() == 1 and store.next_id() == 2  # shard 0's counter
    finally:
        store.close()


def test_a_wake_up_costs_one_shard_call_and_idle_claims_cost_none(redis_url, redis_ns, clock):
    store = ShardedStore(redis_url, redis_ns, shards=8, clock=clock)
    producer = ShardedStore(redis_url, redis_ns, shards=8, clock=clock)
    counting = CountingShards(store)
    woke = threading.Event()
    unsubscribe = store.subscribe(lambda due_in: woke.set())
    try:
        assert store.claim_due(ALL, 30, "o").claims == []
        assert counting.take() == [1] * 8  # the first claim sweeps every shard
        assert store.claim_due(ALL, 30, "o").claims == []
        assert counting.take() == [0] * 8  # idle: nothing due anywhere, no calls
        woke.clear()
        producer.add(spec("x", After(0)))  # another process's enqueue
        assert woke.wait(5), "no wake-up"
        batch = store.claim_due(ALL, 30, "o")
        assert [c.job_id for c in batch.claims] == ["x"]
        calls = counting.take()
        assert sum(calls) == 1 and calls[store.shards.index(store.shard("x"))] == 1
        clock.advance(store.resync * 1.5)  # the resync sweep visits every shard
        store.claim_due(ALL, 30, "o")
        assert counting.take() == [1] * 8
    finally:
        unsubscribe()
        store.close()
        producer.close()


def test_claims_rotate_over_shards_and_stop_when_capacity_is_used(redis_url, redis_ns, clock):
    store = ShardedStore(redis_url, redis_ns, shards=4, clock=clock)
    counting = CountingShards(store)
    try:
        for i in range(40):
            store.add(spec(f"j{i}", After(0)))
        counting.take()
        firsts = []
        for _ in range(8):
            batch = store.claim_due({"default": 1}, 30, "o")
            assert len(batch.claims) == 1
            calls = counting.take()
            assert sum(calls) == 1  # one shard per claim of one job
            firsts.append(calls.index(1))
        assert set(firsts) == {0, 1, 2, 3}  # every shard served in turn
        full = store.claim_due({"default": 0}, 30, "o")
        assert full.claims == [] and sum(counting.take()) == 0
    finally:
        store.close()


def test_readers_never_record_a_shard_count(redis_url, redis_ns, clock, redis_client):
    reader = ShardedStore(redis_url, redis_ns, shards=4, clock=clock)
    key = f"duetime:{{{redis_ns}}}:shards"
    try:
        assert reader.jobs() == [] and reader.get("x") is None and reader.events() == []
        assert not redis_client.exists(key)  # a typo in `duetime ls` locks nothing
        reader.add(spec("a", After(1)))
        assert redis_client.get(key) == b"4"  # the first write records it
    finally:
        reader.close()


def test_a_failing_shard_does_not_lose_the_claims_made_in_others(redis_url, redis_ns, clock):
    store = ShardedStore(redis_url, redis_ns, shards=4, clock=clock)
    try:
        for i in range(20):
            store.add(spec(f"j{i}", After(0)))
        broken = store.shards[2]
        real = broken.claim_due

        def down(*args, **kw):  # noqa: ANN002, ANN003, ANN202
            raise ConnectionError("node down")

        broken.claim_due = down  # type: ignore[method-assign]
        first = store.claim_due(ALL, 30, "o")
        assert first.claims and first.next_due_in == SHARD_RETRY  # the broken one, later
        assert {store.shards.index(store.shard(c.job_id)) for c in first.claims} <= {0, 1, 3}
        broken.claim_due = real  # type: ignore[method-assign]
        clock.advance(SHARD_RETRY)
        rest = store.claim_due(ALL, 30, "o").claims
        assert sorted(c.job_id for c in first.claims + rest) == sorted(f"j{i}" for i in range(20))
    finally:
        store.close()


def test_a_shard_whose_node_is_down_stops_no_other_shard(redis_url, redis_ns, clock, caplog):
    """A stranger's cluster: with one master down, claims stopped in every shard, those on
    healthy nodes too (nothing ran for 60 s). The down shard was first in every round (its
    estimate was never moved on), and its failure failed the round: the dispatcher backed
    off before asking the others. Now it is set aside for SHARD_RETRY s; the round fails
    only when no shard answers."""
    store = ShardedStore(redis_url, redis_ns, shards=4, clock=clock)
    try:
        broken = store.shards[1]

        def down(*args, **kw):  # noqa: ANN002, ANN003, ANN202
            raise ConnectionError("Error 111 connecting to 127.0.0.1:16483")

        broken.claim_due = down  # type: ignore[method-assign]
        claimed: list[str] = []
        for n in range(6):  # a job comes due in some shard each round; the broken one waits
            store.add(spec(f"r{n}", After(0)))
            claimed += [c.job_id for c in store.claim_due(ALL, 30, "o").claims]
            clock.advance(SHARD_RETRY)  # the broken shard is asked again every round
        on_broken = {f"r{n}" for n in range(6) if store.shard(f"r{n}") is broken}
        assert sorted(claimed) == sorted({f"r{n}" for n in range(6)} - on_broken)
        assert caplog.text.count("claiming from shard 1 failed") == 1  # logged once
        for s in store.shards:
            s.claim_due = down  # type: ignore[method-assign]
        with pytest.raises(ConnectionError):  # no shard answers: the round fails
            store.claim_due(ALL, 30, "o")
    finally:
        store.close()


def test_complete_many_commits_each_claim_in_its_shard_in_order(redis_url, redis_ns, clock):
    store = ShardedStore(redis_url, redis_ns, shards=4, clock=clock)
    try:
        for i in range(12):
            store.add(spec(f"j{i}", After(0)))
        claims = store.claim_due(ALL, 30, "o").claims
        assert len({store.shards.index(store.shard(c.job_id)) for c in claims}) > 1
        first = claims[0]
        assert store.complete(first, "early").name == "OK"
        codes = store.complete_many([(c, None) for c in claims])
        assert [c.name for c in codes] == ["OK"] * len(claims)  # a repeat answers ok again
        assert all(store.get(c.job_id).state == "succeeded" for c in claims)
        assert store.complete_many([]) == []
    finally:
        store.close()


def test_a_burst_on_shards_is_claimed_in_batches_and_run_once(redis_url, redis_ns):
    from scheduler import Scheduler
    from tests.helpers import WAIT

    store = ShardedStore(redis_url, redis_ns, shards=4, resync=30)
    n = 400
    store.add_many([spec(f"b{i}", After(0)) for i in range(n)])

    def succeeded() -> int:
        return sum(int(s.redis.hget(s.keys.stats, "succeeded") or 0) for s in store.shards)

    with Scheduler(2, store=store, lookahead=1.0) as eng:
        deadline = time.monotonic() + WAIT * 4
        while succeeded() < n:
            assert time.monotonic() < deadline, "the burst did not finish"
            time.sleep(0.01)
        assert eng.wait_idle(WAIT)
    claimed = sum(int(s.redis.hget(s.keys.stats, "claimed") or 0) for s in store.shards)
    assert claimed == n and succeeded() == n
    assert {store.get(f"b{i}").runs for i in range(0, n, 37)} == {1}
    store.close()


def test_a_claims_next_due_in_counts_from_before_the_first_shard(redis_url, redis_ns, clock):
    """The shards' estimates are on the store's clock, read before the first shard is
    asked: the batch says so (``since``), so a dispatcher on that clock wakes at the due
    time itself, not late by the round trips of every shard visited."""
    store = ShardedStore(redis_url, redis_ns, shards=4, clock=clock)
    store.add(spec("later", After(7)))
    t0 = clock.now()
    batch = store.claim_due({"default": 2}, 30.0, "o1")
    assert batch.claims == [] and batch.since == t0
    assert batch.next_due_in is not None and abs(t0 + batch.next_due_in - (t0 + 7)) < 0.002
    store.close()
