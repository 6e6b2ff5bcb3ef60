"""Issue 14: ``AsyncClient`` has every public method of ``Client``, with the same
arguments, validation and errors; it is safe to share across tasks and never blocks the
event loop; it works as an async context manager."""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest

from scheduler import AsyncClient, Client

pytestmark = pytest.mark.redis


def public(cls: type) -> dict[str, inspect.Signature]:
    return {
        n: inspect.signature(f)
        for n, f in vars(cls).items()
        if callable(f) and not n.startswith("_")
    }


def test_every_public_method_of_client_has_an_awaitable_twin():
    sync, aio = public(Client), public(AsyncClient)
    assert set(sync) <= set(aio), set(sync) - set(aio)
    for name, sig in sync.items():
        assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name
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
