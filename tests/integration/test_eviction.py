"""Eviction is detected and named (issue 30, item 4), against real private redis-servers:
producers refuse to enqueue under an evicting ``maxmemory-policy`` (the replicas' message),
a policy switched while a replica runs raises the data-loss alarm naming eviction, and
``duetime doctor`` counts the jobs an evicting Redis lost."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys

import pytest

from scheduler import AsyncClient, Client
from scheduler.stores.redis import RedisStore, StoreConfigError
from scheduler.stores.redis.integrity import checks
from scheduler.stores.redis.reading import queries
from tests.faults.fleet import ROOT

pytestmark = pytest.mark.redis


def duetime(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def replica_refusal(url: str, ns: str) -> str:
    """The message a replica starting on this server refuses with."""
    store = RedisStore(url, ns)
    try:
        with pytest.raises(StoreConfigError) as refused:
            store.check_server()
    finally:
        store.close()
    return str(refused.value)


def info_calls(r) -> int:
    """INFO calls so far, not counting the ones this helper made (its own is counted)."""
    calls = int(r.info("commandstats").get("cmdstat_info", {}).get("calls", 0))
    r.incr("probe:info-asked")
    return calls - int(r.get("probe:info-asked"))


def test_producers_refuse_to_enqueue_under_an_evicting_policy(private_redis, redis_ns):
    import redis

    r = redis.Redis(port=private_redis.port, decode_responses=True)
    r.config_set("maxmemory-policy", "allkeys-lru")
    message = replica_refusal(private_redis.url, redis_ns)
    assert "maxmemory-policy 'allkeys-lru'" in message

    with Client(private_redis.url, namespace=redis_ns) as client:
        with pytest.raises(StoreConfigError) as refused:
            client.enqueue("bench.noop", delay=60, job_id="c1")
        assert str(refused.value) == message
        with pytest.raises(StoreConfigError):
            client.enqueue_many([{"task": "bench.noop", "delay": 60, "job_id": "c2"}])

    async def produce() -> str:
        client = AsyncClient(private_redis.url, namespace=redis_ns)
        try:
            with pytest.raises(StoreConfigError) as refused:
                await client.enqueue("bench.noop", delay=60, job_id="a1")
            with pytest.raises(StoreConfigError):
                await client.enqueue_many([{"task": "bench.noop", "delay": 60, "job_id": "a2"}])
            return str(refused.value)
        finally:
            await client.close()

    assert asyncio.run(produce()) == message

    out = duetime(
        "enqueue", "bench.noop", "--in", "60s", "--redis", private_redis.url,
        "--namespace", redis_ns,
    )  # fmt: skip
    assert out.returncode == 1, out
    assert out.stderr.splitlines() == [f"error: {message}"], out.stderr
    assert r.keys(f"duetime:{{{redis_ns}}}:job:*") == []  # nothing was written


def test_the_producers_check_is_cached_and_asked_again(private_redis, redis_ns, monkeypatch):
    """One INFO at the first enqueue, none for the next ones; once the answer is
    PRODUCER_CHECK_S old it is asked again and a switched policy is refused."""
    import redis

    from scheduler.stores.redis.integrity import server_checks

    r = redis.Redis(port=private_redis.port, decode_responses=True)
    with Client(private_redis.url, namespace=redis_ns) as client:
        before = info_calls(r)
        client.enqueue("bench.noop", delay=60, job_id="j0")
        assert info_calls(r) - before == 1
        for i in range(1, 50):
            client.enqueue("bench.noop", delay=60, job_id=f"j{i}")
        assert info_calls(r) - before == 1  # cached: no round trip per enqueue
        r.config_set("maxmemory-policy", "allkeys-lru")
        client.enqueue("bench.noop", delay=60, job_id="cached")  # within the period
        clock = server_checks.time.monotonic() + server_checks.PRODUCER_CHECK_S + 1
        monkeypatch.setattr(server_checks.time, "monotonic", lambda: clock)
        with pytest.raises(StoreConfigError, match="allkeys-lru"):
            client.enqueue("bench.noop", delay=60, job_id="refused")
        assert r.exists(f"duetime:{{{redis_ns}}}:job:refused") == 0


def test_a_policy_switched_while_a_replica_runs_raises_the_eviction_alarm(
    private_redis, redis_ns, monkeypatch, caplog
):
    import redis

    r = redis.Redis(port=private_redis.port, decode_responses=True)
    monkeypatch.setattr(checks, "REPLICA_CHECK_S", 0.0, raising=False)  # every claim checks
    store = RedisStore(private_redis.url, redis_ns)
    try:
        store.check_server()
        store.claim_due({"default": 10}, 30.0, "r1")
        assert queries.stats(store)["data_loss_alarms"] == 0

        # volatile-lru evicts only keys with a TTL (the fillers below), never the events
        # stream this test reads its alarms from (allkeys-lru could, and did: a flake)
        r.config_set("maxmemory-policy", "volatile-lru")
        with caplog.at_level(logging.ERROR, logger="duetime"):
            store.claim_due({"default": 10}, 30.0, "r1")
            store.claim_due({"default": 10}, 30.0, "r1")  # the same policy: one alarm
        losses = [e for e in store.events(100) if e.kind == "data_loss"]
        assert len(losses) == 1, losses
        assert losses[0].detail.startswith("eviction: maxmemory-policy changed from")
        assert "volatile-lru" in losses[0].detail
        assert "failover" not in losses[0].detail
        errors = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.ERROR]
        assert any("evicts keys" in m and "volatile-lru" in m for m in errors), errors
        assert not any("failover" in m for m in errors), errors
        assert queries.stats(store)["data_loss_alarms"] == 1

        # keys evicted since the last check: another alarm, with the count
        r.config_set("maxmemory", str(int(r.info("memory")["used_memory"]) + 2_000_000))
        for i in range(400):
            r.set(f"filler:{i}", "x" * 20_000, ex=3600)
        evicted = int(r.info("stats")["evicted_keys"])
        assert evicted > 0
        r.config_set("maxmemory", "0")
        store.claim_due({"default": 10}, 30.0, "r1")
        losses = [e for e in store.events(100) if e.kind == "data_loss"]
        evictions = [e for e in losses if e.detail.startswith("eviction: Redis evicted")]
        assert len(evictions) == 1, losses
        assert f"evicted_keys 0 -> {evicted}" in evictions[0].detail
        # the namespace's epoch may be among the keys evicted: its alarm names eviction too
        assert len(losses) in (2, 3) and all("eviction" in e.detail for e in losses), losses
    finally:
        store.close()


def test_a_running_replica_process_names_eviction(private_redis, redis_ns, tmp_path):
    """`duetime run`, then allkeys-lru switched on: within its check period (10 s) the
    replica logs the alarm and records a data_loss event naming eviction."""
    import redis

    from tests.faults.fleet import replicas, wait_until

    r = redis.Redis(port=private_redis.port, decode_responses=True)
    with replicas(private_redis.url, redis_ns, "w", count=1, log_dir=tmp_path) as fleet:
        alive = f"duetime:{{{redis_ns}}}:replica:*"
        assert wait_until(lambda: r.keys(alive), 60), fleet.log_text()
        r.config_set("maxmemory-policy", "allkeys-lru")
        store = RedisStore(private_redis.url, redis_ns)
        try:

            def alarms() -> list:
                return [e for e in store.events(100) if e.kind == "data_loss"]

            assert wait_until(alarms, 60), fleet.log_text()
            assert alarms()[0].detail.startswith("eviction: maxmemory-policy changed")
        finally:
            store.close()
        assert wait_until(lambda: "evicts keys" in fleet.log_text(), 30), fleet.log_text()
    assert "failover" not in fleet.log_text()


def test_a_lost_enqueue_under_eviction_names_eviction_not_failover(private_redis, redis_ns, caplog):
    """The seq counter found lower than acknowledged (the key evicted): the alarm says
    eviction, not "a failover or a restart without fsync"."""
    import redis

    r = redis.Redis(port=private_redis.port, decode_responses=True)
    with Client(private_redis.url, namespace=redis_ns) as client:
        for i in range(3):
            client.enqueue("bench.noop", delay=60, job_id=f"j{i}")
        r.config_set("maxmemory-policy", "allkeys-lru")  # after the producer's check
        r.delete(f"duetime:{{{redis_ns}}}:seq")  # what an eviction of the counter does
        with caplog.at_level(logging.ERROR, logger="duetime"):
            client.enqueue("bench.noop", delay=60, job_id="after")
    errors = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert any("lacks writes" in m and "eviction" in m for m in errors), errors
    assert not any("failover" in m for m in errors), errors
    r.config_set("maxmemory-policy", "noeviction")
    with Client(private_redis.url, namespace=redis_ns) as client:
        losses = [e for e in client.events(100) if e.kind == "data_loss"]
    assert len(losses) == 1 and "cause: eviction" in losses[0].detail, losses


def test_doctor_counts_the_jobs_an_evicting_redis_lost(private_redis, redis_ns):
    """20,000 enqueues accepted, then allkeys-lru (and a maxmemory below what is used)
    switched on while a consumer claims and completes the due ones and a producer that
    checked the policy before the switch (within its cached period) goes on enqueueing:
    most job keys are evicted. Once the policy is set back, doctor exits 1 and its lost
    count is within 1 % of the truth (the jobs that neither ran nor wait)."""
    import math
    import time

    import redis

    from scheduler.model import Commit

    r = redis.Redis(port=private_redis.port, decode_responses=True)
    consumer = RedisStore(private_redis.url, redis_ns)
    done: set[str] = set()

    def consume() -> None:
        batch = consumer.claim_due({"default": 200}, 30.0, "c1").claims
        acks = consumer.complete_many([(c, None) for c in batch])
        done.update(c.job_id for c, a in zip(batch, acks, strict=True) if a == Commit.OK)

    def jobs(ids: list[str]) -> list[dict]:
        return [
            {"task": "bench.noop", "job_id": j, "delay": 0 if n % 4 == 0 else 3600}
            for n, j in enumerate(ids)
        ]

    ids = [f"j{i:05d}" for i in range(20_000)]
    more = [f"k{i:05d}" for i in range(2_000)]
    with Client(private_redis.url, namespace=redis_ns) as client:
        for n in range(0, 20_000, 500):
            client.enqueue_many(jobs(ids[n : n + 500]))
        # LRU ages in whole seconds: wait until the first jobs are older than what runs now
        deadline = time.monotonic() + 60
        while r.object("idletime", f"duetime:{{{redis_ns}}}:job:{ids[0]}") < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        used = int(r.info("memory")["used_memory"])
        r.config_set("maxmemory", str(used * 3 // 4))
        r.config_set("maxmemory-policy", "allkeys-lru")
        check = getattr(client.store, "_eviction", None)  # (None before the check existed)
        if check is not None:
            check.period = math.inf  # its check came before the switch: not asked again
        for n in range(0, 2_000, 100):
            client.enqueue_many(jobs(more[n : n + 100]))
            consume()
        for _ in range(40):
            consume()
    consumer.close()
    evicted_keys = int(r.info("stats")["evicted_keys"])
    r.config_set("maxmemory-policy", "noeviction")  # what the alarm tells the operator
    r.config_set("maxmemory", "0")

    everyone = ids + more
    with r.pipeline(transaction=False) as p:
        for j in everyone:
            p.hget(f"duetime:{{{redis_ns}}}:job:{j}", "state")
            p.exists(f"duetime:{{{redis_ns}}}:job:{j}")
        got = p.execute()
    live = {
        j for j, st, there in zip(everyone, got[::2], got[1::2], strict=True) if there and not st
    }
    truth = len([j for j in everyone if j not in done and j not in live])  # neither ran nor waits
    assert truth > 2_000  # the case of the issue: many accepted jobs went

    code, report = doctor(private_redis.url, redis_ns)
    assert code == 1, (report.get("live"), report.get("eviction"))
    assert report["live"]["found"] == len(live)
    assert report["live"]["lost"] is not None, report["live"]
    assert abs(report["live"]["lost"] - truth) <= truth / 100, (report["live"], truth)
    print(
        f"\nenqueued {len(everyone)}, evicted keys {evicted_keys}, ran {len(done)}, lost "
        f"(truth) {truth}; doctor: counted {report['live']['counted']} found "
        f"{report['live']['found']} lost {report['live']['lost']}"
    )


def test_doctor_never_invents_a_lost_count(private_redis, redis_ns):
    """A namespace whose count is gone (older than the count, or its stats hash evicted) on
    a server that has evicted keys: doctor says the loss is unknown and exits 1; once the
    server's eviction statistics are reset it starts the count (and exits 0)."""
    import redis

    r = redis.Redis(port=private_redis.port, decode_responses=True)
    with Client(private_redis.url, namespace=redis_ns) as client:
        client.enqueue_many([{"task": "bench.noop", "delay": 3600} for _ in range(20)])
    r.hdel(f"duetime:{{{redis_ns}}}:stats", "live", "live_since")  # as if evicted
    r.config_set("maxmemory", str(int(r.info("memory")["used_memory"]) + 500_000))
    r.config_set("maxmemory-policy", "volatile-lru")  # only keys with a TTL: not the jobs
    for i in range(200):
        r.set(f"filler:{i}", "x" * 10_000, ex=3600)
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", "0")
    assert int(r.info("stats")["evicted_keys"]) > 0

    code, report = doctor(private_redis.url, redis_ns)
    assert code == 1, report
    assert report["live"]["counted"] is None and report["live"]["lost"] is None
    assert report["live"]["found"] == 20 and not report["live"]["count_started"]
    out = duetime("doctor", "--redis", private_redis.url, "--namespace", redis_ns)
    assert "lost jobs: unknown" in out.stdout and "evicted" in out.stdout, out.stdout

    r.config_resetstat()
    code, report = doctor(private_redis.url, redis_ns)
    assert code == 0, report
    assert report["live"]["count_started"] and report["live"]["counted"] == 20


def doctor(url: str, ns: str, *more: str) -> tuple[int, dict]:
    out = duetime("doctor", "--redis", url, "--namespace", ns, "--json", *more)
    assert out.stdout, out
    return out.returncode, json.loads(out.stdout)
