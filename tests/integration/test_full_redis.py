"""A Redis out of memory (``maxmemory`` reached, ``noeviction``), issue 30 item 3: what
frees memory or drains what is stored still runs (claim with its reaper, the commit path,
plan, reconcile). The drain by replica processes is fault case F10d (tests/faults)."""

from __future__ import annotations

import pytest
import redis

from scheduler.model import After, Cron
from scheduler.stores.redis import RedisStore, StoreFullError
from tests.helpers import spec

pytestmark = pytest.mark.redis


def test_a_full_redis_still_starts_a_replica_claims_commits_plans_and_reconciles(
    private_redis, clock
):
    """What a running replica needs on a full Redis: its start (the server and key
    checks, the epoch, a reconciler pass), claims with the reaper, commits, the plans of
    a cron series (plan.lua), and reconcile (doctor)."""
    store = RedisStore(private_redis.url, "drain", clock=clock, lease=1)
    store.add(spec("one", After(0)))
    store.add(spec("two", After(0)))
    store.add(spec("cron", Cron("* * * * *", tz="UTC")))
    raw = redis.Redis(port=private_redis.port)
    raw.config_set("maxmemory", 1)
    with pytest.raises(StoreFullError):
        store.add(spec("more", After(0)))
    store.check_server()  # a replica starting now: no write it needs is refused
    clock.advance(60)
    batch = store.claim_due({"default": 10}, 1, "r1")
    assert sorted(c.job_id for c in batch.claims) == ["cron", "one", "two"]
    assert store.get("cron").next_run is not None  # planned (plan.lua) on the full Redis
    one = next(c for c in batch.claims if c.job_id == "one")
    assert store.complete(one, None).value == "ok"
    clock.advance(5)  # "two" and "cron" outlive their 1 s lease: the reaper requeues them
    again = store.claim_due({"default": 10}, 1, "r2")
    assert "two" in {c.job_id for c in again.claims}
    assert store.reconcile().complete
    assert raw.config_get("maxmemory") == {"maxmemory": "1"}
    raw.close()
    store.close()
