"""Interrupting a job that runs on another replica (``Client.cancel(id, interrupt=True)``,
``duetime cancel --interrupt``): the flag on the job reaches the replica that runs it at
its next lease renewal, which cancels the invocation's token, as a local
``cancel(interrupt=True)`` does. Before, ``interrupt`` reached only the calling process,
and a job running elsewhere could not be stopped short of killing its replica.
Deterministic: the replica is an engine on the fake clock (its heartbeat fires when the
test advances the clock past a third of the lease); the job waits on its token."""

from __future__ import annotations

import asyncio
import threading

import pytest
from click.testing import CliRunner

from scheduler import AsyncClient, Client, RedisStore, current_invocation, task
from scheduler.cli import main
from scheduler.stores.memory import MemoryStore
from tests.helpers import WAIT

pytestmark = pytest.mark.redis

LEASE = 3.0
_seen: dict[str, threading.Event] = {}


@task("tests.interrupt.wait_for_stop")
def wait_for_stop() -> str:
    _seen["started"].set()
    stopped = current_invocation().token.wait(WAIT)
    _seen["stopped" if stopped else "ran out"].set()
    return "stopped" if stopped else "ran out"


def _running(make_engine, clock, redis_url, redis_ns):
    _seen.update(started=threading.Event(), stopped=threading.Event())
    store = RedisStore(redis_url, redis_ns, clock=clock)
    make_engine(num_workers=1, store=store, lease=LEASE)
    client = Client(RedisStore(redis_url, redis_ns, clock=clock))
    job = client.enqueue("tests.interrupt.wait_for_stop", delay=0)
    clock.advance(0.01)
    assert _seen["started"].wait(WAIT)
    return client, job


def test_a_job_running_on_another_replica_stops_at_its_next_renewal(
    make_engine, clock, redis_url, redis_ns
):
    client, job = _running(make_engine, clock, redis_url, redis_ns)
    assert client.cancel(job, interrupt=True) is False  # a running one-off: no start to prevent
    assert not _seen["stopped"].is_set()  # asked, not yet told
    clock.advance(LEASE / 3 + 0.01)  # the replica's heartbeat renews, and reads the request
    assert _seen["stopped"].wait(WAIT)
    assert client.get(job).state == "cancelled"


def test_without_interrupt_the_running_job_is_left_to_finish(
    make_engine, clock, redis_url, redis_ns
):
    client, job = _running(make_engine, clock, redis_url, redis_ns)
    client.cancel(job)
    clock.advance(LEASE / 3 + 0.01)
    clock.advance(LEASE / 3 + 0.01)  # two renewals: the job is still running
    assert client.get(job).running and not _seen["stopped"].is_set()
    client.cancel(job, interrupt=True)
    clock.advance(LEASE / 3 + 0.01)
    assert _seen["stopped"].wait(WAIT)


def test_a_replica_that_cancels_with_interrupt_reaches_the_one_that_runs_it(
    make_engine, clock, redis_url, redis_ns
):
    client, job = _running(make_engine, clock, redis_url, redis_ns)
    other = make_engine(num_workers=1, store=RedisStore(redis_url, redis_ns, clock=clock))
    other.cancel(job, interrupt=True)  # it runs nothing of the job itself
    clock.advance(LEASE / 3 + 0.01)
    assert _seen["stopped"].wait(WAIT)


def test_an_async_client_asks_too(make_engine, clock, redis_url, redis_ns):
    client, job = _running(make_engine, clock, redis_url, redis_ns)

    async def cancel() -> bool:
        async with AsyncClient(redis_url, namespace=redis_ns) as aclient:
            return await aclient.cancel(job, interrupt=True)

    assert asyncio.run(cancel()) is False
    clock.advance(LEASE / 3 + 0.01)
    assert _seen["stopped"].wait(WAIT)


def test_the_cli_asks_the_running_invocations_to_stop(make_engine, clock, redis_url, redis_ns):
    client, job = _running(make_engine, clock, redis_url, redis_ns)
    args = ["cancel", job, "--redis", redis_url, "-n", redis_ns]
    plain = CliRunner().invoke(main, args)
    assert plain.exit_code == 1, plain.output
    assert "its 1 running invocation(s) may finish (--interrupt asks them to stop)" in plain.stderr
    asked = CliRunner().invoke(main, [*args, "--interrupt"])
    assert asked.exit_code == 0, asked.output
    assert "1 running invocation(s) asked to stop" in asked.stdout
    clock.advance(LEASE / 3 + 0.01)
    assert _seen["stopped"].wait(WAIT)


def test_interrupt_through_a_store_that_cannot_carry_it_says_what_to_use():
    client = Client(MemoryStore())
    with pytest.raises(
        TypeError, match=r"in process, use Scheduler\.cancel\(job_id, interrupt=True\)"
    ):
        client.cancel("x", interrupt=True)


def test_a_sharded_namespace_reads_the_requests_of_every_shard(redis_url, redis_ns):
    from scheduler.stores.redis.sharded import open_store

    store = open_store(redis_url, redis_ns, shards=4)
    try:
        ids = [f"j{i}" for i in range(12)]
        asked = {j for j in ids if int(j[1:]) % 3 == 0}
        for j in asked:
            part = store.shard(j)
            part.redis.hset(part.keys.job(j), "interrupt", "1")
        assert len({store.shard(j).keys.shard for j in asked}) > 1  # spread over shards
        assert store.interrupted(ids) == asked
    finally:
        store.close()
