"""Sentinel URLs in the Client and the CLI, and WAIT after writes (replication.py), on a
real primary + replica + three sentinels (no failover here; see test_failover.py)."""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner

from scheduler import Client
from scheduler.cli import main
from scheduler.model import After
from scheduler.stores.redis import RedisStore, StoreUnavailableError
from scheduler.stores.redis.protocol.keys import Keys
from tests.helpers import spec
from tests.sentinel_fixtures import SentinelCluster, shared_sentinel_cluster  # noqa: F401

pytestmark = [pytest.mark.redis]


def on_replica(cluster: SentinelCluster, key: str) -> bool:
    """True when the (non-primary) replica already has ``key``: read it there at once."""
    import redis

    address = cluster.primary_address()
    replica = next(s for s in cluster.servers if address is None or s.port != address[1])
    with redis.Redis(port=replica.port) as r:
        return bool(r.exists(key))


def test_wait_for_one_replica_returns_once_the_replica_has_the_write(
    shared_sentinel_cluster, redis_ns, clock
):
    store = RedisStore(
        shared_sentinel_cluster.url, redis_ns, clock=clock, wait_replicas=1, wait_timeout_ms=5000
    )
    store.add(spec("a", After(0)))
    assert on_replica(shared_sentinel_cluster, store.keys.job("a"))
    assert store.claim_due({"default": 5}, 30, "o").claims
    store.add_many([spec(f"m{i}", After(0)) for i in range(3)])
    assert on_replica(shared_sentinel_cluster, store.keys.job("m2"))
    assert store.waiter.unreplicated_writes == 0
    store.close()


def test_wait_for_more_replicas_than_exist_counts_and_warns_but_keeps_the_write(
    shared_sentinel_cluster, redis_ns, clock, caplog
):
    store = RedisStore(
        shared_sentinel_cluster.url, redis_ns, clock=clock, wait_replicas=2, wait_timeout_ms=20
    )
    with caplog.at_level(logging.WARNING, "duetime.redis"):
        store.add(spec("a", After(0)))
        store.add_many([spec("b", After(0)), spec("c", After(0))])
    assert store.waiter.unreplicated_writes == 3  # 1 add + a batch of 2
    assert "WAIT 2 20: only 1 replica(s) confirmed" in caplog.text
    assert caplog.text.count("WAIT 2 20") == 1  # rate-limited
    assert store.get("a") is not None and store.get("c") is not None  # written anyway
    store.close()


def test_wait_survives_flushed_scripts_and_libraries(shared_sentinel_cluster, redis_ns, clock):
    store = RedisStore(
        shared_sentinel_cluster.url, redis_ns, clock=clock, wait_replicas=1, wait_timeout_ms=5000
    )
    store.add(spec("a", After(0)))
    store.redis.script_flush()  # as after a failover or a restart
    store.redis.function_flush()
    store.add(spec("b", After(0)))
    assert [c.job_id for c in store.claim_due({"default": 5}, 30, "o").claims] == ["a", "b"]
    store.close()


def test_bad_wait_settings_are_refused(shared_sentinel_cluster):
    with pytest.raises(ValueError, match="wait_timeout_ms must be >= 1"):
        RedisStore(shared_sentinel_cluster.url, "x", wait_replicas=1, wait_timeout_ms=0)
    with pytest.raises(ValueError, match="wait_replicas must be >= 0"):
        RedisStore(shared_sentinel_cluster.url, "x", wait_replicas=-1)


def test_client_and_cli_take_a_sentinel_url(shared_sentinel_cluster, redis_ns):
    url = shared_sentinel_cluster.url
    runner = CliRunner()
    out = runner.invoke(
        main,
        [
            "enqueue",
            "--redis",
            url,
            "-n",
            redis_ns,
            "--wait-replicas",
            "1",
            "--wait-timeout-ms",
            "5000",
            "--redis-timeout",  # a WAIT of up to 5 s fits in a call of up to 10
            "10",
            "--in",
            "60",
            "--id",
            "j1",
            "tests.x",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {"job_id": "j1"}
    with Client(url, namespace=redis_ns, wait_replicas=1, wait_timeout_ms=5000) as client:
        client.enqueue("tests.x", delay=60, job_id="j2")
        assert on_replica(shared_sentinel_cluster, Keys(redis_ns).job("j2"))  # WAIT did it
        assert client.get("j1").state == "scheduled"
    out = runner.invoke(main, ["ls", "--redis", url, "-n", redis_ns, "--json"])
    assert out.exit_code == 0, out.output
    assert sorted(j["job_id"] for j in json.loads(out.output)["jobs"]) == ["j1", "j2"]


@pytest.mark.parametrize(
    "command", [["ls"], ["enqueue", "tests.x"], ["run", "--import", "tests.helpers"]]
)
def test_a_malformed_sentinel_url_is_a_usage_error(command):
    out = CliRunner().invoke(main, [*command, "--redis", "redis+sentinel://h:26379"])
    assert out.exit_code == 2, out.output
    assert "service name is missing" in out.output
    assert "redis+sentinel://[user:password@]host1:26379" in out.output


def test_sentinel_url_credentials_reach_the_primary_and_a_forbidden_wait_is_raised(
    shared_sentinel_cluster, redis_ns, clock
):
    import redis

    address = shared_sentinel_cluster.primary_address()
    assert address is not None
    with redis.Redis(*address) as admin:
        admin.acl_setuser(
            "nowait",
            enabled=True,
            passwords=["+s3cret"],
            keys=["*"],
            channels=["*"],
            commands=["+@all", "-wait"],
        )
    url = shared_sentinel_cluster.url.replace(
        "redis+sentinel://", "redis+sentinel://nowait:s3cret@"
    )
    plain = RedisStore(url, redis_ns, clock=clock)
    plain.add(spec("a", After(0)))  # authenticated as nowait
    assert plain.redis.acl_whoami() == "nowait"
    plain.close()
    waiting = RedisStore(url, redis_ns, clock=clock, wait_replicas=1)
    with pytest.raises(redis.exceptions.NoPermissionError, match="wait"):
        waiting.add(spec("b", After(0)))
    waiting.close()
    bad = RedisStore(url.replace("s3cret", "wrong"), redis_ns, clock=clock)
    with pytest.raises(StoreUnavailableError, match="invalid username-password") as info:
        bad.add(spec("c", After(0)))
    assert "wrong" not in str(info.value) and "nowait:***@" in str(info.value)
    bad.close()
