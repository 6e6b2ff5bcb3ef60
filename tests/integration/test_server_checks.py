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


def test_a_newer_layout_refuses_the_readers_of_a_library_store(redis_url, redis_ns, redis_client):
    """The CLI and AsyncClient checked the layout before reading; a RedisStore's (and so a
    sync Client's) get, jobs and events read a newer duetime's jobs as they found them, and
    a Client's list_jobs, quarantine, limits, key rules and retries did too."""
    from scheduler import Client
    from scheduler.errors import LayoutRefusedError

    writer = RedisStore(redis_url, redis_ns)
    writer.add(spec("a", After(3600)))
    redis_client.set(writer.keys.layout, "9")  # a newer version wrote the namespace
    writer.close()
    store = RedisStore(redis_url, redis_ns)
    for read in (lambda: store.get("a"), store.jobs, store.events):
        with pytest.raises(LayoutRefusedError, match="layout 9 in this namespace"):
            read()
    store.close()
    reads = {  # each a fresh client: a store checks its namespace once
        "get": lambda c: c.get("a"),
        "list_jobs": lambda c: c.list_jobs("scheduled"),
        "quarantined": lambda c: c.quarantined(),
        "limits": lambda c: c.limits(),
        "key_rules": lambda c: c.key_rules(),
        "retry_failed": lambda c: c.retry_failed(),
    }
    for name, read in reads.items():
        client = Client(redis_url, namespace=redis_ns)
        with client, pytest.raises(LayoutRefusedError, match="run one version of duetime"):
            read(client)
            pytest.fail(f"Client.{name} read a namespace of a newer layout")


def test_a_running_engine_stops_claiming_when_a_newer_layout_appears(
    redis_url, redis_ns, redis_client, caplog
):
    """A replica of this version already running when a newer one wrote the namespace
    warned "claiming failed" at every back-off, forever, ready to no one: its loop now
    ends, said once at ERROR, and its metrics hear of it (duetime run exits: below)."""
    from scheduler import Scheduler
    from scheduler.errors import LayoutRefusedError
    from scheduler.signals import Signals

    store = RedisStore(redis_url, redis_ns, resync=3600)
    store.add(spec("later", After(3600)))
    signals = Signals()
    heard: list[BaseException] = []
    signals.on_refused = heard.append
    with caplog.at_level(logging.WARNING, logger="duetime"):
        engine = Scheduler(1, store=store, metrics=signals)
        assert engine._dispatcher.wait_quiet(30)  # its first round reached the store
        redis_client.set(store.keys.layout, "9")
        engine._dispatcher.poke()
        engine._dispatcher._thread.join(30)
        assert not engine._dispatcher._thread.is_alive()  # the loop ended
        engine.shutdown(wait=True, timeout=10)
    assert len(heard) == 1 and isinstance(heard[0], LayoutRefusedError)
    said = [r for r in caplog.records if "layout 9" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.ERROR
    assert said[0].getMessage().startswith("claiming stopped: layout 9 in this namespace")
    ready, why = signals.ready()
    assert not ready and "LayoutRefusedError: layout 9" in why


def test_duetime_run_exits_1_when_a_newer_layout_appears(
    redis_url, redis_ns, redis_client, tmp_path
):
    """`duetime run`, running, meets a namespace a newer duetime wrote: one ERROR line,
    then the clean stop and exit 1 with the refusal (a starting replica refused already)."""
    from tests.integration.test_run_where import RUNNING, Run, env

    store = RedisStore(redis_url, redis_ns)
    store.add(spec("later", After(3600)))
    args = ["--redis", redis_url, "--namespace", redis_ns, "--import", "tests.helpers"]
    run = Run(args, tmp_path, env())
    try:
        assert run.until(RUNNING) is not None, run.seen
        redis_client.set(store.keys.layout, "9")
        redis_client.publish(store.keys.wake, "0")  # claim now (not at the next resync)
        lines = run.rest()
    finally:
        run.close()
        store.close()
    assert run.proc.returncode == 1, lines
    assert sum("claiming stopped: layout 9 in this namespace" in line for line in lines) == 1
    assert lines[-1] == (
        "error: layout 9 in this namespace, but this duetime reads layouts 1 to 4: run one "
        "version of duetime per namespace"
    ), lines
