"""workers.effects.redis against a real redis-server: fenced.lua applies a write only with
the newest fence its key's ledger has seen for the occurrence, as an upsert keyed by the
invocation, and refuses a stale one with nothing written."""

from __future__ import annotations

import asyncio
import threading

import pytest
import redis
from redis.crc import key_slot

from scheduler import JobScheduler
from workers.effects import Fence, StaleFenceError
from workers.effects.redis import (
    afenced_hset,
    afenced_set,
    afenced_xadd,
    fenced_hset,
    fenced_set,
    fenced_xadd,
    ledger_key,
)

pytestmark = pytest.mark.redis

SCHED = 1_767_225_600_000
OLD, NEW = Fence("pay", SCHED, 5), Fence("pay", SCHED, 7)


@pytest.fixture
def key(redis_ns: str) -> str:
    return f"{redis_ns}:report"


def test_a_lower_fence_is_refused_and_writes_nothing(redis_client, key):
    fenced_set(redis_client, key, "old", invocation=OLD)
    fenced_set(redis_client, key, "new", invocation=NEW)  # the re-run: overwrites
    with pytest.raises(StaleFenceError, match=r"^write refused by the ledger of t\w+:report") as e:
        fenced_set(redis_client, key, "stale", invocation=OLD)
    assert (e.value.fence, e.value.newest) == (5, 7)
    assert redis_client.get(key) == b"new"
    assert redis_client.hgetall(ledger_key(key)) == {f"pay@{SCHED}".encode(): b"7"}
    fenced_set(redis_client, key, "again", invocation=NEW)  # an equal fence: applied
    fenced_set(redis_client, key, "next", invocation=Fence("pay", SCHED + 1, 1))  # its own
    assert redis_client.get(key) == b"next"


def test_hset_upserts_its_fields_and_leaves_the_others(redis_client, key):
    redis_client.hset(key, "mine", "kept")
    fenced_hset(redis_client, key, {"total": 10, "by": "old"}, invocation=OLD)
    fenced_hset(redis_client, key, {"total": 11}, invocation=NEW)
    with pytest.raises(StaleFenceError):
        fenced_hset(redis_client, key, {"total": 12, "by": "stale"}, invocation=OLD)
    assert redis_client.hgetall(key) == {b"mine": b"kept", b"total": b"11", b"by": b"old"}


def test_xadd_adds_the_invocations_entry_once(redis_client, key):
    first = fenced_xadd(redis_client, key, {"event": "paid"}, invocation=OLD)
    assert fenced_xadd(redis_client, key, {"event": "paid"}, invocation=NEW) == first
    with pytest.raises(StaleFenceError):
        fenced_xadd(redis_client, key, {"event": "paid"}, invocation=OLD)
    other = fenced_xadd(redis_client, key, {"event": "paid"}, invocation=Fence("x", SCHED, 1))
    assert [e[0].decode() for e in redis_client.xrange(key)] == [first, other]


def test_ttl_and_keep_expire_the_value_and_the_ledger(redis_client, key):
    fenced_set(redis_client, key, "v", ttl=60, keep=3600, invocation=OLD)
    assert 0 < redis_client.pttl(key) <= 60_000
    assert 3_500_000 < redis_client.pttl(ledger_key(key)) <= 3_600_000
    with pytest.raises(ValueError, match=r"^ttl must be finite and > 0"):
        fenced_set(redis_client, key, "v", ttl=0, invocation=OLD)


def test_a_key_of_another_type_is_refused_before_any_write(redis_client, key):
    redis_client.rpush(key, "x")
    with pytest.raises(redis.ResponseError, match="bad-input key .* is a list, expected a string"):
        fenced_set(redis_client, key, "v", invocation=OLD)
    assert redis_client.exists(ledger_key(key)) == 0


def test_the_ledger_shares_the_keys_cluster_slot():
    for key in ("report", "a{b", "{user42}:orders", "a{b}{c}", "日報:1"):
        assert key_slot(key.encode()) == key_slot(ledger_key(key).encode()), key
    assert ledger_key("{user42}:orders") == "{user42}:orders:fence"
    assert ledger_key("report") == "{report}:fence"
    for key in ("a}b", "x{}y"):  # hashed whole, and no wrapping keeps that
        with pytest.raises(ValueError, match=r"has a '\}' but no hash tag"):
            ledger_key(key)


def test_an_explicit_ledger_is_used(redis_client, key):
    ledger = f"{{{key}}}:my-ledger"
    fenced_set(redis_client, key, "v", ledger=ledger, invocation=NEW)
    assert redis_client.hget(ledger, f"pay@{SCHED}") == b"7"
    with pytest.raises(StaleFenceError):
        fenced_set(redis_client, key, "v", ledger=ledger, invocation=OLD)


def test_inside_a_job_the_running_invocation_is_used(redis_url, key):
    done, ids = threading.Event(), []

    def job() -> None:
        with redis.Redis.from_url(redis_url) as r:
            ids.append(fenced_xadd(r, key, {"k": "v"}))
        done.set()

    with JobScheduler(num_workers=1) as s:
        job_id = s.schedule(job, 0)
        assert done.wait(10)
    with redis.Redis.from_url(redis_url) as r:
        [(field, fence)] = [(f, v) for f, v in r.hgetall(ledger_key(key)).items() if b" " not in f]
    assert field.decode().startswith(f"{job_id}@") and int(fence) >= 1


def test_outside_a_job_it_says_what_to_do(redis_client, key):
    with pytest.raises(RuntimeError, match=r"^fenced_set\(\) needs the invocation"):
        fenced_set(redis_client, key, "v")


def test_the_async_helpers_keep_the_same_contract(redis_url, key):
    import redis.asyncio as aredis

    async def main() -> tuple[bytes | None, int]:
        r = aredis.Redis.from_url(redis_url)
        try:
            await afenced_set(r, key, "new", invocation=NEW)
            with pytest.raises(StaleFenceError):
                await afenced_set(r, key, "stale", invocation=OLD)
            await afenced_hset(r, key + ":h", {"a": 1}, invocation=NEW)
            one = await afenced_xadd(r, key + ":s", {"a": 1}, invocation=OLD)
            assert await afenced_xadd(r, key + ":s", {"a": 2}, invocation=NEW) == one
            return await r.get(key), await r.xlen(key + ":s")
        finally:
            await r.aclose()

    assert asyncio.run(main()) == (b"new", 1)
