"""Startup checks and data-loss detection against real, private redis-servers."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from scheduler.model import After
from scheduler.stores.redis import RedisStore, StoreConfigError
from tests.faults.fleet import ROOT
from tests.helpers import spec

pytestmark = pytest.mark.redis


def test_eviction_policy_is_refused_with_the_fix(private_redis, redis_ns):
    import redis

    redis.Redis(port=private_redis.port).config_set("maxmemory-policy", "allkeys-lru")
    store = RedisStore(private_redis.url, redis_ns)
    with pytest.raises(StoreConfigError, match="maxmemory-policy noeviction"):
        store.check_server()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler",
            "run",
            "--redis",
            private_redis.url,
            "--namespace",
            redis_ns,
            "--import",
            "tests.helpers",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1 and "noeviction" in out.stderr
    store.close()


def test_aof_off_is_a_warning(redis_url, redis_ns, redis_server):
    import redis

    aof = redis.Redis(port=redis_server.port).config_get("appendonly")["appendonly"]
    store = RedisStore(redis_url, redis_ns)
    warnings = store.check_server()
    assert bool(warnings) == (aof == "no")
    store.close()


def test_redis_coming_back_empty_raises_the_alarm(private_redis, redis_ns, clock, caplog):
    import redis

    store = RedisStore(private_redis.url, redis_ns, clock=clock)
    store.check_server()
    store.add(spec("a", After(0)))
    store.claim_due({"default": 1}, 30, "o")
    assert store.data_loss_alarms == 0
    redis.Redis(port=private_redis.port).flushall()  # a private server: Redis lost it all
    with caplog.at_level(logging.ERROR):
        store.claim_due({"default": 1}, 30, "o")
    assert store.data_loss_alarms == 1
    assert "lost duetime's data" in caplog.text
    assert [e.kind for e in store.events()] == ["data_loss"]
    store.claim_due({"default": 1}, 30, "o")  # a new epoch: one alarm per loss
    assert store.data_loss_alarms == 1
    store.close()


def test_a_namespace_of_another_data_layout_is_refused_loudly(
    redis_url, redis_ns, redis_client, clock
):
    store = RedisStore(redis_url, redis_ns, clock=clock)
    store.add(spec("a", After(0)))
    assert redis_client.get(store.keys.layout) == b"4"
    redis_client.set(store.keys.layout, "5")  # a newer version's (2: exact rates, 3: ready, 4: st)
    with pytest.raises(StoreConfigError, match="layout 5 in this namespace"):
        store.claim_due({"default": 1}, 30, "o")
    store.close()


def test_check_server_runs_once_per_store(redis_url, redis_ns, caplog):
    store = RedisStore(redis_url, redis_ns)
    assert store.check_server() is store.check_server()
    store.close()
