"""Issue 14: ``AsyncClient`` has every public method of ``Client``, with the same
arguments, validation and errors; it is safe to share across tasks and never blocks the
event loop; it works as an async context manager."""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import time
import warnings

import pytest

from scheduler import AsyncClient, Client
from tests.sentinel_fixtures import shared_sentinel_cluster  # noqa: F401  (a module's)

pytestmark = pytest.mark.redis


def public(cls: type) -> dict[str, inspect.Signature]:
    return {
        n: inspect.signature(f)
        for n, f in vars(cls).items()
        if callable(f) and not n.startswith("_")
    }


NO_IO = {"handle"}  # makes a handle, sends nothing: a plain call in both clients


def test_every_public_method_of_client_has_an_awaitable_twin():
    sync, aio = public(Client), public(AsyncClient)
    assert set(sync) <= set(aio), set(sync) - set(aio)
    for name, sig in sync.items():
        awaited = inspect.iscoroutinefunction(getattr(AsyncClient, name))
        assert awaited != (name in NO_IO), name
        assert list(aio[name].parameters) == list(sig.parameters), name


def test_shared_across_tasks_same_errors_and_the_loop_keeps_running(redis_url, redis_ns):
    async def main() -> None:
        async with AsyncClient(redis_url, namespace=redis_ns) as client:
            ticks = 0
            stop = asyncio.Event()

            async def ticker() -> None:  # proves the loop is never blocked for long
                nonlocal ticks
                while not stop.is_set():
                    ticks += 1
                    await asyncio.sleep(0.001)

            t = asyncio.create_task(ticker())
            ids = await asyncio.gather(
                *(client.enqueue("some.task", delay="1h", job_id=f"j{i}") for i in range(50))
            )
            assert sorted(ids) == sorted(f"j{i}" for i in range(50))
            assert len(await client.jobs()) == 50
            assert (await client.get("j7")).task == "some.task"
            assert await client.cancel("j7") is True
            assert [e.kind for e in await client.events(200)].count("cancelled") == 1
            with pytest.raises(ValueError, match="job id"):
                await client.cancel("")
            with pytest.raises(TypeError, match="kwargs must be a mapping"):
                await client.enqueue("some.task", kwargs=[1])
            stop.set()
            await t
            assert ticks > 0

    t0 = time.monotonic()
    asyncio.run(main())
    assert time.monotonic() - t0 < 30


# ---- the same answers as Client, on every URL form --------------------------------------

HOUR = 3600.0


def outcome(call, *args, **kwargs):
    """A call's result, or its error as (type, message): what both clients must agree on."""
    try:
        return call(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - compared, not swallowed
        return (type(exc).__name__, str(exc))


def tour(client, store) -> list:
    """Every public method of ``Client``, in an order whose answers are deterministic
    (times left out); ``store``: a sync store of the namespace, to fail a job."""
    from scheduler.stores.redis.protocol import definitions

    t = []
    t.append(client.enqueue("t.a", delay="1h", job_id="a", kwargs={"x": 1}))
    t.append(client.enqueue("t.r", every=60, anchor=1_700_000_000, job_id="r"))
    t.append(client.enqueue("t.c", cron="0 3 * * *", tz="Europe/Paris", job_id="c"))
    t.append(
        client.enqueue_many(
            [{"task": "t.m", "job_id": f"m{i}", "delay": 600 + i} for i in range(5)]
        )
    )
    t.append(outcome(client.enqueue, "t.a", kwargs=[1]))
    t.append(outcome(client.enqueue, "t.a", delay=-5))
    t.append(outcome(client.enqueue_many, [{"task": "t.x", "every": "bogus"}]))
    info = client.get("a")
    t.append((info.state, info.task, info.args, info.schedule, info.lane))
    t.append([client.pause("a"), client.pause("a"), client.resume("a"), client.resume("a")])
    t.append([client.trigger("r"), client.trigger("nope")])
    t.append([client.cancel("m4"), client.cancel("m4"), client.cancel("nope")])
    t.append(outcome(client.cancel, ""))
    t.append(outcome(client.get, "nope"))
    t.append(client.backfill("r", 1_700_000_000, 1_700_000_600))
    t.append(client.backfill("r", 1_700_000_000, 1_700_000_600))  # nothing twice
    t.append(outcome(client.backfill, "r", 10, 5))
    t.append(client.backfill("nope", 1_700_000_000, 1_700_000_600))
    t.append([(i.job_id, i.state) for i in client.jobs()])
    t.append(sorted(e.kind for e in client.events(1000)))
    pages, cursor = [], None
    while True:
        page = client.list_jobs("scheduled", limit=2, cursor=cursor)
        pages.append([i.job_id for i in page.jobs])
        cursor = page.cursor
        if cursor is None:
            break
    t.append(sorted(j for p in pages for j in p))
    t.append(outcome(client.list_jobs, "bogus"))
    t.append([i.job_id for i in client.list_jobs("cancelled").jobs])
    client.enqueue("t.f", job_id="f")
    (c,) = [c for c in store.claim_due({"default": 50}, 10.0, "o1").claims if c.job_id == "f"]
    store.fail(c, "boom", None)
    t.append([i.job_id for i in client.list_jobs("dead").jobs])
    t.append(client.retry_failed("t.other"))
    t.append(client.retry("f"))
    t.append(outcome(client.retry, "f"))
    t.append(outcome(client.retry, "nope"))
    t.append(client.retry_failed())
    t.append([client.delete("f"), client.delete("f")])
    t.append([client.quarantined(), client.restore("nope"), client.purge_quarantined()])
    done = client.reconcile(dry_run=True)
    t.append((done.scanned, done.findings, done.complete))
    t.extend(limits_tour(client, store))
    t.append(definitions.__name__)  # the tour ran to its end
    return t


def limits_tour(client, store) -> list:
    """Limits and what waits on them (a sharded namespace refuses limits: the same refusal,
    no usage, nothing held); times left out."""
    from scheduler import flow

    t = [outcome(client.set_limit, "t:*", flow.limit(concurrency=1))]
    for i in range(3):
        client.enqueue("t.k", job_id=f"k{i}", limit_key="t:1")
    store.claim_due({"default": 50}, 10.0, "o1")  # k0 (the key's queue is FIFO); k1, k2 held
    t.append(
        [
            (u.scope, u.keys, u.full_keys, u.running, u.waiting, u.held, [k.key for k in u.top])
            for u in client.limit_usage()
        ]
    )
    holds = [client.hold_of(f"k{i}") for i in range(3)]
    t.append([None if h is None else (h.scope, h.reason, h.running, h.describe()) for h in holds])
    t.append([outcome(client.hold_of, "nope"), outcome(client.hold_of, "")])
    return t


def url_forms(request) -> str:
    kind = request.param
    if kind == "plain":
        return request.getfixturevalue("redis_url")
    if kind == "shards":
        return request.getfixturevalue("redis_url") + "?shards=3"
    if kind == "sentinel":
        return request.getfixturevalue("shared_sentinel_cluster").url
    return request.getfixturevalue("shared_redis_cluster").url + "?shards=2"


@pytest.mark.parametrize("url_form", ["plain", "shards"])
def test_more_tasks_than_the_connection_pool_share_one_client(redis_url, redis_ns, url_form):
    """300 tasks enqueueing at once through one AsyncClient: redis.asyncio's pool holds
    100 connections and refused the 101st ("Too many connections"); the client now lets
    at most IN_FLIGHT operations talk to Redis at once, the others wait their turn."""
    url = redis_url if url_form == "plain" else f"{redis_url}?shards=4"

    async def main() -> tuple[list[str], int]:
        async with AsyncClient(url, namespace=redis_ns) as client:
            ids = await asyncio.gather(
                *(client.enqueue("some.task", delay="1h") for _ in range(300)),
                client.enqueue_many([{"task": "some.task", "delay": 60}] * 50),
            )
            return [i for i in ids if isinstance(i, str)], len(await client.jobs())

    ids, stored = asyncio.run(main())
    assert len(set(ids)) == 300 and stored == 350


@pytest.fixture(params=["plain", "shards", "sentinel", "cluster"])
def any_url(request) -> str:
    return url_forms(request)


def test_async_client_answers_as_client_does_on_every_url_form(any_url, redis_ns):
    from scheduler.stores.redis.sharding.sharded import open_store
    from tests.helpers import Blocking

    answers = []
    for kind, ns in (("sync", redis_ns), ("async", redis_ns + "-aio")):
        store = open_store(any_url, ns)
        if kind == "sync":
            client = Client(any_url, namespace=ns)
        else:
            client = Blocking(AsyncClient(any_url, namespace=ns))
        try:
            answers.append(tour(client, store))
        finally:
            client.close()
            store.close()
    sync, aio = answers
    assert aio == sync
    assert sync[-1] == "scheduler.stores.redis.protocol.definitions"


def test_async_client_waits_for_replicas_through_sentinel(
    shared_sentinel_cluster,  # noqa: F811
    redis_ns,
):
    from scheduler.stores.redis.protocol.keys import Keys
    from tests.integration.test_sentinel import on_replica

    async def main() -> None:
        url = shared_sentinel_cluster.url
        async with AsyncClient(url, namespace=redis_ns, wait_replicas=1, wait_timeout_ms=5000) as c:
            await c.enqueue("tests.x", delay=60, job_id="j2")
            assert on_replica(shared_sentinel_cluster, Keys(redis_ns).job("j2"))
            assert c.store.waiter.unreplicated_writes == 0

    asyncio.run(main())


def test_a_shard_count_mismatch_is_refused_as_client_refuses_it(redis_url, redis_ns):
    Client(redis_url + "?shards=3", namespace=redis_ns).enqueue("t.a", job_id="a")

    async def main() -> str:
        async with AsyncClient(redis_url + "?shards=2", namespace=redis_ns) as c:
            with pytest.raises(Exception) as err:
                await c.get("a")
            return f"{type(err.value).__name__}: {err.value}"

    with pytest.raises(Exception) as sync_err:
        Client(redis_url + "?shards=2", namespace=redis_ns).get("a")
    assert asyncio.run(main()) == f"{type(sync_err.value).__name__}: {sync_err.value}"


def test_an_unreachable_server_is_the_same_error(redis_ns):
    url = "redis://127.0.0.1:1/0"

    async def main() -> str:
        async with AsyncClient(url, namespace=redis_ns) as c:
            with pytest.raises(Exception) as err:
                await c.cancel("a")
            return type(err.value).__name__

    with pytest.raises(Exception) as sync_err:
        Client(url, namespace=redis_ns).cancel("a")
    assert asyncio.run(main()) == type(sync_err.value).__name__ == "StoreUnavailableError"


def test_a_bad_url_is_refused_with_the_same_message():
    for url in ("http://x", "redis+sentinel://h:1", "redis://h?shards=0"):
        with pytest.raises(ValueError) as a:
            AsyncClient(url)
        with pytest.raises(ValueError) as b:
            Client(url)
        assert str(a.value) == str(b.value)


def test_each_call_yields_the_loop_while_redis_answers(redis_url, redis_ns):
    """A ticker task on the same loop runs during every single call (a call that blocked
    on its socket, or ran to its end without suspending, would let it run 0 times)."""

    async def main() -> list[int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        async with AsyncClient(redis_url + "?shards=2", namespace=redis_ns) as client:
            t = asyncio.create_task(ticker())
            await asyncio.sleep(0)
            during = []
            for i in range(200):
                before = ticks
                await client.enqueue("t.a", delay=60, job_id=f"j{i}")
                await client.get(f"j{i}")
                during.append(ticks - before)
            t.cancel()
            return during

    during = asyncio.run(main())
    assert min(during) >= 2, during  # at least one tick per round trip


def test_the_tour_exercises_what_it_claims(redis_url, redis_ns):
    from scheduler.stores.redis import RedisStore

    store = RedisStore(redis_url, redis_ns)
    with Client(redis_url, namespace=redis_ns) as client:
        t = tour(client, store)
    store.close()
    assert t[13] == 10 and t[14] == 0  # backfill queued 10 runs, then none
    assert t[22] == ["f"] and t[24] == 1  # a dead job listed, then retried
    set_limit, usage, holds, refused = t[-5:-1]  # the limits' part
    assert set_limit is True and usage == [("t:*", 1, 1, 1, 2, 2, ["t:1"])]
    assert holds[0] is None  # it runs
    assert holds[1] == ("t:*", "concurrency", 1, "limit t:* (concurrency 1: 1 running)")
    assert refused[0][0] == "JobNotFoundError" and refused[1][0] == "ValueError"


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_both_clients_detect_lost_enqueues(kind, shards, redis_url, redis_ns, redis_client):
    """A ``seq`` counter found below one the client was given (a failover or a restart
    without fsync lost acknowledged adds) is said: a data_loss event, and the counter is
    raised above every seq handed out, on the sync and the async client alike."""
    from tests.helpers import Blocking

    if kind == "Client":
        client: object = Client(redis_url, namespace=redis_ns, shards=shards)
    else:
        client = Blocking(AsyncClient(redis_url, namespace=redis_ns, shards=shards))
    with client:  # type: ignore[attr-defined]
        jobs = [{"task": "t.a", "job_id": f"a{i}", "delay": 60} for i in range(30)]
        client.enqueue_many(jobs)  # type: ignore[attr-defined]
        client.enqueue("t.a", job_id="one", delay=60)  # type: ignore[attr-defined]
        assert not [e for e in client.events(500) if e.kind == "data_loss"]  # type: ignore[attr-defined]
        seqs = [k for k in redis_client.scan_iter(match=f"duetime:*{redis_ns}*seq")]
        assert len(seqs) == shards
        given = {k: int(redis_client.get(k)) for k in seqs}
        for key in seqs:  # what a server that lost its last writes would hold
            redis_client.set(key, 1)
        client.enqueue_many([{**j, "job_id": f"b{n}"} for n, j in enumerate(jobs)])  # type: ignore[attr-defined]
        losses = [e for e in client.events(500) if e.kind == "data_loss"]  # type: ignore[attr-defined]
        assert len(losses) == shards  # one per shard whose counter went back
        assert all("acknowledged enqueue(s) or reschedule(s) lost" in e.detail for e in losses)
        assert all(int(redis_client.get(k)) >= given[k] for k in seqs)  # raised back
        client.enqueue_many([{**j, "job_id": f"c{n}"} for n, j in enumerate(jobs)])  # type: ignore[attr-defined]
        assert len([e for e in client.events(500) if e.kind == "data_loss"]) == shards  # once


def test_closing_from_another_loop_after_the_first_ended_closes_it(redis_url, redis_ns, caplog):
    """``asyncio.run(client.close())`` at exit, after the loop that used the client ended:
    it raised "Event loop is closed" and left the client open, so closing again failed
    too."""
    from scheduler import ClientClosedError

    client = AsyncClient(redis_url, namespace=redis_ns)
    jid = asyncio.run(client.enqueue("some.task", delay="1h"))
    with caplog.at_level(logging.WARNING, "duetime.client"):
        asyncio.run(client.close())
    assert "close the client inside the loop that uses it" in caplog.text
    asyncio.run(client.close())  # closing again is harmless
    with pytest.raises(ClientClosedError):
        asyncio.run(client.get(jid))
    with warnings.catch_warnings():  # the first loop's connection, gone with that loop
        warnings.simplefilter("ignore", ResourceWarning)
        del client
        gc.collect()


def test_a_closed_client_refuses_instead_of_reconnecting(redis_url, redis_ns, recwarn):
    """After ``close()`` (or its ``with`` block) both clients raise ClientClosedError;
    redis-py would reconnect silently, and the async one leaked that connection
    ("unclosed Connection" at exit). Closing twice is harmless; the job enqueued before
    is there for a new client."""
    from scheduler import ClientClosedError

    with Client(redis_url, namespace=redis_ns) as c:
        jid = c.enqueue("some.task", delay="1h")
    with pytest.raises(ClientClosedError, match=r"this Client is closed.*`with` block"):
        c.enqueue("some.task", delay="1h")
    with pytest.raises(ClientClosedError):
        c.get(jid)
    c.close()

    async def main() -> None:
        async with AsyncClient(redis_url, namespace=redis_ns) as a:
            assert (await a.get(jid)).task == "some.task"
        with pytest.raises(ClientClosedError, match=r"this AsyncClient is closed.*`async with`"):
            await a.enqueue("some.task", delay="1h")
        with pytest.raises(ClientClosedError):
            await a.jobs()
        await a.close()
        b = AsyncClient(Client(redis_url, namespace=redis_ns).store)  # over a Store: a thread
        assert (await b.get(jid)).task == "some.task"
        await b.close()
        with pytest.raises(ClientClosedError, match="this AsyncClient is closed"):
            await b.cancel(jid)
        await b.close()

    asyncio.run(main())
    with Client(redis_url, namespace=redis_ns) as fresh:
        assert fresh.get(jid).task == "some.task"
    assert not [w for w in recwarn if issubclass(w.category, ResourceWarning)]


def test_an_async_client_used_on_a_second_event_loop_says_so(redis_url, redis_ns):
    """redis.asyncio's connections belong to the loop they were made on: a client reused
    by a second ``asyncio.run`` failed with "Event loop is closed". Now it says what to
    do, and a client made inside each loop works."""
    from scheduler.errors import EventLoopMismatchError

    shared = AsyncClient(redis_url, namespace=redis_ns)

    async def enqueue(client: AsyncClient) -> str:
        return await client.enqueue("some.task", delay="1h")

    async def own_client() -> str:
        async with AsyncClient(redis_url, namespace=redis_ns) as mine:
            return await enqueue(mine)

    first = asyncio.run(enqueue(shared))
    with pytest.raises(EventLoopMismatchError, match="create an AsyncClient inside each"):
        asyncio.run(enqueue(shared))
    second = asyncio.run(own_client())
    with Client(redis_url, namespace=redis_ns) as c:
        assert {j.job_id for j in c.jobs()} == {first, second}
