"""A Redis out of memory (``maxmemory`` reached, ``noeviction``), issue 30 item 3: what
adds work is refused with ``StoreFullError``'s one line (``Client``, ``AsyncClient``, every
CLI command that writes: exit 3), never Redis's own text; what frees memory or drains what
is stored still runs (claim with its reaper, the commit path, plan, reconcile, cancel,
delete). The drain by replica processes is fault case F10d (tests/faults)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from scheduler import AsyncClient, Client
from scheduler.cli import main
from scheduler.embedded import EmbeddedRedis
from scheduler.model import After, Cron, Every
from scheduler.stores.redis import RedisStore, StoreFullError
from tests.helpers import spec, write_job_field

pytestmark = pytest.mark.redis

NS = "full"
RAW = "maxmemory'"  # a piece of Redis's own OOM text, which no line may show
LINE = (
    "Redis at {url} is out of memory (maxmemory reached, policy noeviction): nothing was "
    "written; replicas still run what is stored. Raise maxmemory, or cancel or delete jobs "
    "that are not needed, then retry"
)


class Full:
    """A namespace with a job of every kind an operator may act on, on a Redis that is
    then made full (``maxmemory`` 1 byte, ``noeviction``): every write that adds memory is
    refused."""

    def __init__(self, server: EmbeddedRedis) -> None:
        self.url, self.raw = server.url, redis.Redis(port=server.port)
        store = RedisStore(self.url, NS)
        store.add(spec("later", After(3600)))
        store.add(spec("series", Every(60)))
        store.add(spec("held", After(3600)))
        store.pause("held")
        store.add(spec("dead", After(0)))
        store.add(spec("bad", After(0)))
        write_job_field(self.raw, store.keys.job("bad"), "running", "x")  # moved aside by a claim
        dead = next(c for c in store.claim_due({"default": 10}, 30, "o").claims)
        assert dead.job_id == "dead"  # "bad" was moved aside by that claim
        store.fail(dead, "boom", None)
        store.add(spec("running", After(0)))
        store.claim_due({"default": 1}, 30, "o")
        store.close()
        self.raw.config_set("maxmemory", 1)
        self.line = LINE.format(url=f"redis://127.0.0.1:{server.port}/0")

    def refuses(self, call: Any) -> None:
        """``call()`` raises StoreFullError whose text is the library's line alone."""
        with pytest.raises(StoreFullError) as err:
            call()
        assert str(err.value) == self.line


@pytest.fixture(scope="module")
def full() -> Iterator[Full]:
    with EmbeddedRedis() as server:
        yield Full(server)


WRITES = {
    "enqueue": lambda c: c.enqueue("tests.noop", delay=5),
    "enqueue_many": lambda c: c.enqueue_many([{"task": "tests.noop", "delay": 5}] * 120),
    "trigger": lambda c: c.trigger("later"),
    "pause": lambda c: c.pause("later"),
    "resume": lambda c: c.resume("held"),
    "backfill": lambda c: c.backfill("series", time.time() - 3600, time.time() - 60),
    "retry": lambda c: c.retry("dead"),
    "retry_failed": lambda c: c.retry_failed(),
    "restore": lambda c: c.restore("bad"),
}


@pytest.mark.parametrize("name", list(WRITES))
def test_client_is_refused_with_the_one_line(full, name):
    with Client(full.url, namespace=NS) as client:
        full.refuses(lambda: WRITES[name](client))


@pytest.mark.parametrize("name", [n for n in WRITES if n != "restore"])
def test_async_client_is_refused_with_the_same_line(full, name):
    async def attempt() -> None:
        async with AsyncClient(full.url, namespace=NS) as client:
            await WRITES[name](client)

    full.refuses(lambda: asyncio.run(attempt()))


CLI = {
    "enqueue": ["enqueue", "tests.noop", "--in", "5"],
    "enqueue --every": ["enqueue", "tests.noop", "--every", "10s"],
    "backfill": ["backfill", "series", "--start", "2020-01-01T00:00Z", "--end", "2020-01-02"],
    "trigger": ["trigger", "later"],
    "pause": ["pause", "later"],
    "resume": ["resume", "held"],
    "retry": ["retry", "dead"],
    "retry --failed": ["retry", "--failed"],
    "quarantine restore": ["quarantine", "restore", "bad"],
}


def invoke(full: Full, args: list[str]) -> Any:
    env = {"DUETIME_REDIS_URL": full.url, "DUETIME_NAMESPACE": NS}
    return CliRunner().invoke(main, args, env=env)


@pytest.mark.parametrize("command", list(CLI))
def test_every_cli_command_that_writes_says_the_line_and_exits_3(full, command):
    result = invoke(full, CLI[command])
    out = result.output
    assert result.exit_code == 3, out
    assert "Traceback" not in out and RAW not in out, out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {full.line}"], out


def test_cancel_and_delete_run_but_a_refused_stop_says_what_was_done(full):
    """cancel.lua and delete.lua free memory (allow-oom); asking a running invocation to
    stop is a plain HSET, which a full Redis refuses: the line says the cancel happened."""
    cancelled = full.line.replace(
        "nothing was written",
        "job 'running' was cancelled, but its running invocations were not asked to stop",
    )
    with Client(full.url, namespace=NS) as client:
        with pytest.raises(StoreFullError) as err:
            client.cancel("running", interrupt=True)
        assert str(err.value) == cancelled
        assert client.get("running").state == "cancelled"
        assert client.cancel("later") and client.delete("series")
    result = invoke(full, ["cancel", "running", "--interrupt"])
    assert result.exit_code == 3 and RAW not in result.output, result.output
    assert f"error: {cancelled}" in result.output.splitlines(), result.output


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
