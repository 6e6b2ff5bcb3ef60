"""Interrupting a job that runs on another replica (``Client.cancel(id, interrupt=True)``,
``duetime cancel --interrupt``): the flag on the job reaches the replica that runs it at
its next lease renewal, which cancels the invocation's token, as a local
``cancel(interrupt=True)`` does. Before, ``interrupt`` reached only the calling process,
and a job running elsewhere could not be stopped short of killing its replica.
Deterministic: the replica is an engine on the fake clock (its heartbeat fires when the
test advances the clock past a third of the lease); the job waits on its token."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest
from click.testing import CliRunner

from scheduler import AsyncClient, Client, RedisStore, current_invocation, task
from scheduler.cli import main
from scheduler.stores.memory import MemoryStore
from scheduler.testing import FakeClock
from tests.helpers import WAIT
from workers.context import INTERRUPTED

pytestmark = pytest.mark.redis

LEASE = 3.0
_seen: dict[str, threading.Event] = {}
_why: list[str | None] = []  # each stopped job's token's reason


@task("tests.interrupt.wait_for_stop")
def wait_for_stop() -> str:
    _seen["started"].set()
    token = current_invocation().token
    stopped = token.wait(WAIT)
    _why.append(token.reason)
    _seen["stopped" if stopped else "ran out"].set()
    return "stopped" if stopped else "ran out"


_renewed = threading.Semaphore(0)  # released by each lease renewal of the replica's store


def _replica_store(store: Any) -> Any:
    """``store``, its renewals counted in ``_renewed``: a test advances the clock by a
    renewal's period only once the one before has renewed, so on a busy box the fake
    clock never runs past a lease the heartbeat's thread has not renewed yet."""
    global _renewed
    _renewed = threading.Semaphore(0)
    renew = store.renew

    def counted(*args: Any, **kwargs: Any) -> Any:
        try:
            return renew(*args, **kwargs)
        finally:
            _renewed.release()

    store.renew = counted
    return store


def _a_renewal(clock: FakeClock) -> bool:
    """Advance a third of the lease, then wait for the renewal it fires (the heartbeat arms
    each beat before its store calls, from the clock it read: the advance reaches it)."""
    clock.advance(LEASE / 3 + 0.01)
    return _renewed.acquire(timeout=WAIT)


def _renewals_until_stopped(clock: FakeClock, renewals: int = 20) -> bool:
    """Renewal by renewal until the job says it was interrupted (the renewal that reads
    the request stops it; one more is harmless if the job's thread is slow to say so; a
    lease lost instead, its token's reason says so, fails the test)."""
    for _ in range(renewals):
        assert _a_renewal(clock), "no lease renewal"
        if _seen["stopped"].wait(WAIT / 10):
            return _why[-1:] == [INTERRUPTED] or pytest.fail(f"stopped for {_why[-1:]}")
    return False


@task("tests.interrupt.await_stop")
async def await_stop(swallow: bool = False) -> str:
    _seen["started"].set()
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        _why.append(current_invocation().token.reason)
        _seen["stopped"].set()
        if not swallow:
            raise
        return "swallowed it"
    return "ran out"


def _running(make_engine, clock, redis_url, redis_ns):
    _seen.update(started=threading.Event(), stopped=threading.Event())
    store = _replica_store(RedisStore(redis_url, redis_ns, clock=clock))
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
    assert _renewals_until_stopped(clock)  # the replica's heartbeat renews, reads the request
    assert client.get(job).state == "cancelled"


def test_without_interrupt_the_running_job_is_left_to_finish(
    make_engine, clock, redis_url, redis_ns
):
    client, job = _running(make_engine, clock, redis_url, redis_ns)
    client.cancel(job)
    assert _a_renewal(clock) and _a_renewal(clock)  # two renewals: the job is still running
    assert client.get(job).running and not _seen["stopped"].is_set()
    client.cancel(job, interrupt=True)
    assert _renewals_until_stopped(clock)


def test_a_replica_that_cancels_with_interrupt_reaches_the_one_that_runs_it(
    make_engine, clock, redis_url, redis_ns
):
    client, job = _running(make_engine, clock, redis_url, redis_ns)
    other = make_engine(num_workers=1, store=RedisStore(redis_url, redis_ns, clock=clock))
    other.cancel(job, interrupt=True)  # it runs nothing of the job itself
    assert _renewals_until_stopped(clock)


def test_an_async_client_asks_too(make_engine, clock, redis_url, redis_ns):
    client, job = _running(make_engine, clock, redis_url, redis_ns)

    async def cancel() -> bool:
        async with AsyncClient(redis_url, namespace=redis_ns) as aclient:
            return await aclient.cancel(job, interrupt=True)

    assert asyncio.run(cancel()) is False
    assert _renewals_until_stopped(clock)


def test_the_cli_asks_the_running_invocations_to_stop(make_engine, clock, redis_url, redis_ns):
    client, job = _running(make_engine, clock, redis_url, redis_ns)
    args = ["cancel", job, "--redis", redis_url, "-n", redis_ns]
    plain = CliRunner().invoke(main, args)
    assert plain.exit_code == 1, plain.output
    assert "its 1 running invocation(s) may finish (--interrupt asks them to stop)" in plain.stderr
    asked = CliRunner().invoke(main, [*args, "--interrupt"])
    assert asked.exit_code == 0, asked.output
    assert "1 running invocation(s) asked to stop" in asked.stdout
    assert _renewals_until_stopped(clock)


def test_interrupt_through_a_store_that_cannot_carry_it_says_what_to_use():
    client = Client(MemoryStore())
    with pytest.raises(
        TypeError, match=r"in process, use Scheduler\.cancel\(job_id, interrupt=True\)"
    ):
        client.cancel("x", interrupt=True)


def test_a_sharded_namespace_reads_the_requests_of_every_shard(redis_url, redis_ns):
    from scheduler.stores.redis.sharding.sharded import open_store

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


@pytest.mark.parametrize("swallow", [False, True])
def test_an_async_job_interrupted_on_another_replica_ends_as_interrupted_not_failed(
    make_engine, clock, redis_url, redis_ns, swallow, caplog
):
    """An operator's stop is not a failure to triage: no dead letter, no failure counted,
    logged at INFO; nor a success, even if the job swallows its CancelledError. The
    invocation's end is an ``interrupted`` event, and ``show`` and ``ls`` read the job as
    cancelled, its last run as interrupted."""
    caplog.set_level(logging.INFO, logger="duetime.workers")
    _seen.update(started=threading.Event(), stopped=threading.Event())
    store = _replica_store(RedisStore(redis_url, redis_ns, clock=clock))
    replica = make_engine(num_workers=1, store=store, lease=LEASE)
    client = Client(RedisStore(redis_url, redis_ns, clock=clock))
    kwargs = {"swallow": swallow}
    job = client.enqueue("tests.interrupt.await_stop", delay=0, kwargs=kwargs)
    clock.advance(0.01)
    assert _seen["started"].wait(WAIT)
    assert client.cancel(job, interrupt=True) is False
    assert _renewals_until_stopped(clock)  # the replica's heartbeat reads the request
    assert replica.wait_idle()
    ended = [r for r in caplog.records if r.name == "duetime.workers" and job in r.getMessage()]
    assert [r.levelname for r in ended if "interrupted:" in r.getMessage()] == ["INFO"]
    assert not [r for r in ended if r.levelno >= logging.WARNING], ended
    info = client.get(job)
    assert (info.state, info.runs, info.failures) == ("cancelled", 0, 0), info
    assert info.dead_letters == () and info.last_error is None and info.last_result is None
    mine = [e for e in client.events(100) if e.job_id == job]
    assert [e.kind for e in mine if e.kind in {"interrupted", "failed", "dead_lettered",
            "succeeded", "retried"}] == ["interrupted"]  # fmt: skip
    assert "interrupted by cancel(interrupt=True)" in mine[-1].detail
    cli = ["--redis", redis_url, "-n", redis_ns]
    shown = CliRunner().invoke(main, ["show", job, *cli])
    assert shown.exit_code == 0, shown.output
    assert "state        cancelled" in shown.stdout and "failed       0 run(s)" in shown.stdout
    assert "s interrupted (newest first)" in shown.stdout and "dead letters none" in shown.stdout
    dead = CliRunner().invoke(main, ["ls", "--state", "dead", *cli])
    assert job not in dead.stdout, dead.output
    cancelled = CliRunner().invoke(main, ["ls", "--state", "cancelled", *cli])
    assert job in cancelled.stdout, cancelled.output


def test_a_timeout_of_an_async_job_still_fails_and_is_dead_lettered(
    make_engine, clock, redis_url, redis_ns
):
    _seen.update(started=threading.Event(), stopped=threading.Event())
    store = _replica_store(RedisStore(redis_url, redis_ns, clock=clock))
    replica = make_engine(num_workers=1, store=store, lease=LEASE)
    client = Client(RedisStore(redis_url, redis_ns, clock=clock))
    job = client.enqueue("tests.interrupt.await_stop", delay=0, timeout=1)
    clock.advance(0.01)
    assert _seen["started"].wait(WAIT)
    clock.advance(1)
    assert _seen["stopped"].wait(WAIT)
    assert replica.wait_idle()
    info = client.get(job)
    assert (info.state, info.failures) == ("failed", 1), info
    assert "timeout" in (info.last_error or "") and len(info.dead_letters) == 1
    assert "interrupted" not in {e.kind for e in client.events(100)}


def test_a_sharded_namespace_records_an_interrupt_in_the_jobs_shard(
    make_engine, clock, redis_url, redis_ns
):
    from scheduler.stores.redis.sharding.sharded import open_store

    _seen.update(started=threading.Event(), stopped=threading.Event())
    replica = make_engine(
        num_workers=1,
        store=_replica_store(open_store(redis_url, redis_ns, shards=3, clock=clock)),
        lease=LEASE,
    )
    client = Client(open_store(redis_url, redis_ns, shards=3, clock=clock))
    job = client.enqueue("tests.interrupt.await_stop", delay=0)
    clock.advance(0.01)
    assert _seen["started"].wait(WAIT)
    client.cancel(job, interrupt=True)
    assert _renewals_until_stopped(clock)
    assert replica.wait_idle()
    info = client.get(job)
    assert (info.state, info.failures, info.dead_letters) == ("cancelled", 0, ()), info
    assert "interrupted" in {e.kind for e in client.events(100) if e.job_id == job}
