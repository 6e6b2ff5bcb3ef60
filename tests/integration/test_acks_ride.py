"""Successes ride with the next claim (``complete_and_claim``, claiming/acked_claims.py): one round
trip, acks first; a lost reply resends both halves safely; NOSCRIPT is handled; in a
burst, acks flushed on their own drop to ~0 while each is still committed once."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import pytest
import redis

from scheduler import Scheduler, task
from scheduler import engine as engine_module
from scheduler.model import After, Commit, Every, JobSpec, Overlap, TaskRef
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.protocol import gateway
from scheduler.stores.redis.sharding.sharded import ShardedStore, open_store
from scheduler.testing import FakeClock
from tests.faults.proxy import Proxy
from tests.helpers import WAIT, read_job_field, spec

pytestmark = pytest.mark.redis

CAPS = {"default": 2}


def script_calls(r: redis.Redis) -> int:
    """Script calls the server ran (FCALL of a library's function, or EVALSHA)."""
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("fcall", "evalsha"))


def kinds_per_job(store: RedisStore) -> dict[tuple[str, str], int]:
    return collections.Counter((e.kind, e.job_id) for e in store.events(1000))


def test_acks_go_first_in_the_claims_round_trip(redis_url, redis_ns):
    store = RedisStore(redis_url, redis_ns, resync=30)
    store.add_many([spec(f"j{i}", After(0)) for i in range(4)])
    first = store.claim_due(CAPS, 30.0, "o1").claims
    scripts = store._scripts  # type: ignore[attr-defined]
    store.redis.function_load(scripts["complete_many"].library, replace=True)  # as if acked once
    sent: list[list[str]] = []
    pipeline = store.redis.pipeline

    def spy(*a: Any, **kw: Any) -> Any:  # every pipeline's commands, as sent
        pipe = pipeline(*a, **kw)
        execute = pipe.execute

        def run(*ea: Any, **ekw: Any) -> Any:
            sent.append([str(args[1]) for args, _ in pipe.command_stack])
            return execute(*ea, **ekw)

        pipe.execute = run
        return pipe

    store.redis.pipeline = spy  # type: ignore[method-assign]
    out = store.complete_and_claim([(c, None) for c in first], CAPS, 30.0, "o1")
    store.redis.pipeline = pipeline  # type: ignore[method-assign]
    assert sent == [[scripts["complete_many"].function, scripts["claim"].function]]  # acks first
    assert out.error is None and out.acks == [Commit.OK, Commit.OK]
    assert out.batch is not None
    assert sorted(c.job_id for c in out.batch.claims) == sorted(
        {"j0", "j1", "j2", "j3"} - {c.job_id for c in first}
    )
    # an ack sent again (first[0]) answers ok again and counts once, beside a new one
    again = store.complete_and_claim([(first[0], None), (out.batch.claims[0], 1)], CAPS, 30, "o1")
    assert again.acks == [Commit.OK, Commit.OK]
    stats = store.redis.hgetall(store.keys.stats)
    assert int(stats["succeeded"]) == 3 and int(stats["claimed"]) == 4
    store.close()


def test_a_lost_reply_resends_both_halves_and_each_counts_once(private_redis, redis_ns):
    proxy = Proxy(private_redis.port)
    raw = redis.Redis.from_url(private_redis.url, decode_responses=True)
    store = RedisStore(proxy.url, redis_ns, resync=30)
    try:
        store.add_many([spec(f"j{i}", After(0)) for i in range(4)])
        first = store.claim_due(CAPS, 30.0, "o1").claims
        raw.function_load(store._scripts["complete_many"].library, replace=True)  # type: ignore[attr-defined]
        calls = script_calls(raw)
        fence = int(raw.get(store.keys.fence) or 0)
        proxy.drop_reply_once(store._scripts["complete_many"].function.encode())  # type: ignore[attr-defined]
        out = store.complete_and_claim([(c, {"n": 1}) for c in first], CAPS, 30.0, "o1")
        assert proxy.dropped_replies == 1  # the pair ran, its reply was lost
        assert script_calls(raw) - calls == 4  # ... and both halves were sent again
        assert out.error is None and out.acks == [Commit.OK, Commit.OK]
        assert out.batch is not None and len(out.batch.claims) == 2
        # the resent claim returned the first reply (its resend record), claimed nothing
        # twice: the fence counter moved by the two claims only, and the record is the reply
        assert int(raw.get(store.keys.fence) or 0) == fence + 2
        record = raw.get(store.keys.claimed("o1"))
        assert record is not None
        from scheduler.stores.redis.claiming.claim_reply import claim_reply

        replied = claim_reply(record)
        assert [(c[0], c[3]) for c in replied.claims] == [
            (c.job_id, c.fence) for c in out.batch.claims
        ]
        stats = raw.hgetall(store.keys.stats)
        assert int(stats["succeeded"]) == 2 and int(stats["claimed"]) == 4
        kinds = kinds_per_job(store)
        assert all(kinds[("succeeded", c.job_id)] == 1 for c in first)
        assert raw.hlen(store.keys.running) == 2  # the two new claims, nothing else
    finally:
        store.close()
        raw.close()
        proxy.close()


@pytest.mark.parametrize("sent", ["functions", "scripts"])
def test_a_server_without_them_is_handled_for_both_halves(private_redis, redis_ns, sent):
    store = RedisStore(private_redis.url, redis_ns, resync=30)
    if sent == "scripts":  # as after a server refused FCALL
        gateway.send_scripts(store.redis)
    store.add_many([spec(f"j{i}", After(0)) for i in range(4)])
    first = store.claim_due(CAPS, 30.0, "o1").claims
    store.redis.script_flush()  # as after a Redis restart: neither script is loaded
    store.redis.function_flush()  # nor library
    out = store.complete_and_claim([(c, None) for c in first], CAPS, 30.0, "o1")
    assert out.error is None and out.acks == [Commit.OK, Commit.OK]
    assert out.batch is not None and len(out.batch.claims) == 2
    assert int(store.redis.hget(store.keys.stats, "succeeded")) == 2
    store.close()


def test_a_claim_error_still_reports_the_acks(redis_url, redis_ns):
    store = RedisStore(redis_url, redis_ns, resync=30)
    store.add(spec("j0", After(0)))
    (c,) = store.claim_due(CAPS, 30.0, "o1").claims
    out = store.complete_and_claim([(c, None)], CAPS, 30.0, "")  # no owner: refused
    assert out.acks == [Commit.OK] and out.batch is None
    assert isinstance(out.error, ValueError)  # as claim_due raises it (bad input)
    store.close()


def test_sharded_acks_ride_to_their_own_shard_only(redis_url, redis_ns):
    store = ShardedStore(redis_url, redis_ns, shards=4, resync=30)
    store.add_many([spec(f"j{i}", After(0)) for i in range(40)])
    first = store.claim_due({"default": 40}, 30.0, "o1").claims
    assert len(first) == 40
    store.add_many([spec(f"k{i}", After(0)) for i in range(40)])
    done = [(c, None) for c in first]
    out = store.complete_and_claim(done, {"default": 1}, 30.0, "o1")
    assert out.error is None and out.batch is not None and len(out.batch.claims) == 1
    visited = store.shard(out.batch.claims[0].job_id)
    for (claim, _), result in zip(done, out.acks, strict=True):
        rode = store.shard(claim.job_id) is visited
        assert (result is Commit.OK) if rode else (result is None)  # others: not sent
    assert any(r is None for r in out.acks) and any(r is Commit.OK for r in out.acks)
    left = [d for d, r in zip(done, out.acks, strict=True) if r is None]
    assert store.complete_many(left) == [Commit.OK] * len(left)  # the caller's flush
    assert sum(int(s.redis.hget(s.keys.stats, "succeeded") or 0) for s in store.shards) == 40
    store.close()


def test_in_a_burst_acks_ride_with_claims_and_each_commits_once(
    private_redis, redis_ns, monkeypatch
):
    """Over a burst of 3,000 due jobs, most successes ride with the next claim and each
    commits once. The one wall-clock knob in the path is the ride delay: a success waits
    ``ACK_RIDE_DELAY`` (25 ms) for a claim, then its timer flushes it alone. How often a
    claim round comes round within 25 ms is this box's speed, not the engine's logic (on
    a 2-core box under load, 2076 of 3,000 rode). The delay is set past anything this
    test waits for, so a success goes alone only when no claim round follows it (a
    drained lane, the last batch): the structure the 80 % bound is about."""
    monkeypatch.setattr(engine_module, "ACK_RIDE_DELAY", WAIT * 12)
    n = 3000
    store = RedisStore(private_redis.url, redis_ns, resync=30)
    alone: list[int] = []  # sizes of the batches flushed on their own
    rode: list[int] = []  # sizes of the batches sent with a claim
    complete_many, complete_and_claim = store.complete_many, store.complete_and_claim

    def flushed(done):  # type: ignore[no-untyped-def]
        alone.append(len(done))
        return complete_many(done)

    def riding(done, *a):  # type: ignore[no-untyped-def]
        rode.append(len(done))
        return complete_and_claim(done, *a)

    store.complete_many = flushed  # type: ignore[method-assign]
    store.complete_and_claim = riding  # type: ignore[method-assign]
    store.add_many([spec(f"b{i}", After(0)) for i in range(n)])
    r = store.redis
    calls = script_calls(r)
    with Scheduler(4, store=store) as eng:
        # every job claimed (counted in the store), then wait_idle: it flushes the
        # successes of the last batch, which no claim round follows
        deadline = time.monotonic() + WAIT * 6
        while int(r.hget(store.keys.stats, "claimed") or 0) < n:
            assert time.monotonic() < deadline, "the burst did not finish"
            time.sleep(0.01)
        assert eng.wait_idle(WAIT * 6)
    scripts = script_calls(r) - calls
    stats = r.hgetall(store.keys.stats)
    assert int(stats["claimed"]) == n and int(stats["succeeded"]) == n  # each once
    assert sum(rode) + sum(alone) == n
    assert sum(rode) >= 0.8 * n, (sum(rode), alone)  # most successes rode with a claim
    # (How many batches went alone is not asserted: a bound of a quarter of the rides
    # failed 1-4 runs in 8 on a slow 2-core box, on the session's starting commit too,
    # with 2-14 % of the successes alone when a lane drained between two claims. The
    # regression it was written for sent a quarter alone: the 80 % above catches it.)
    assert scripts < 0.06 * n  # ~one claim per ~50 jobs, carrying their acks
    assert r.hlen(store.keys.running) == 0 and r.zcard(store.keys.lease) == 0
    store.close()


@pytest.mark.parametrize("shards", [1, 4])
def test_on_a_cluster_acks_ride_to_their_slots_node(shared_redis_cluster, redis_ns, shards):
    store = open_store(shared_redis_cluster.url, redis_ns, shards=shards, resync=30)
    store.add_many([spec(f"j{i}", After(0)) for i in range(8)])
    first = store.claim_due({"default": 8}, 30.0, "o1").claims
    assert len(first) == 8
    store.add_many([spec(f"k{i}", After(0)) for i in range(8)])
    store.redis.script_flush()  # on every primary: both halves meet NOSCRIPT
    done = [(c, None) for c in first]
    out = store.complete_and_claim(done, {"default": 8}, 30.0, "o1")
    assert out.error is None and out.batch is not None and out.batch.claims
    assert all(r in (Commit.OK, None) for r in out.acks) and Commit.OK in out.acks
    left = [d for d, r in zip(done, out.acks, strict=True) if r is None]
    assert store.complete_many(left) == [Commit.OK] * len(left)
    assert sum(int(p.redis.hget(p.keys.stats, "succeeded") or 0) for p in store.parts) == 8
    store.close()


_gate, _started = threading.Event(), threading.Event()
START = 1_000.0  # a test clock's epoch seconds


@task("tests.acks_ride.gated")
def gated() -> None:
    _started.set()
    assert _gate.wait(WAIT)


def test_wait_idle_claims_what_a_flushed_ack_released_without_its_wake_up(redis_url, redis_ns):
    """A success recorded on its own (the idle flush) can release work that is due at
    once (an overlap=queue occurrence parked while the job ran); replicas learn of it by
    a wake-up message, which arrives later or, here, never. wait_idle does not return
    before a claim round after that flush has seen it."""
    _gate.clear()
    _started.clear()
    clock = FakeClock(start=START)
    store = RedisStore(redis_url, redis_ns, clock=clock, resync=3600)
    store._on_wake = lambda *_: None  # type: ignore[method-assign]  # wake-ups never arrive
    job = JobSpec("tick", TaskRef("tests.acks_ride.gated"), Every(10, anchor=START),
                  overlap=Overlap.QUEUE)  # fmt: skip
    store.add(job)
    with Scheduler(2, store=store, clock=clock) as eng:  # 2: a free worker claims at 1020
        clock.advance(10)
        assert _started.wait(WAIT)  # occurrence 1 runs
        _started.clear()
        clock.advance(10)  # occurrence 2 is due while 1 runs: parked in `queued`
        deadline = time.monotonic() + WAIT
        while not read_job_field(store.redis, store.keys.job("tick"), "queued"):
            assert time.monotonic() < deadline, "occurrence 2 was not queued"
            time.sleep(0.005)
        _gate.set()  # 1 ends; its success, flushed, releases 2 (due now)
        assert eng.wait_idle(WAIT)
        assert _started.is_set(), "wait_idle returned while occurrence 2 was due, unstarted"
        assert store.get("tick").runs == 2
    store.close()
