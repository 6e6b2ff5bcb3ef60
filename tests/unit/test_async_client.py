"""``AsyncClient`` over a ``Store`` object: the sync ``Client`` in a worker thread."""

from __future__ import annotations

import asyncio
import inspect

from scheduler import AsyncClient, ClientClosedError, MemoryStore
from scheduler.async_client import StoreInThread


def test_the_thread_backed_client_has_every_public_method():
    """``AsyncClient(store)`` (a Store object) is a StoreInThread: every public method of
    AsyncClient is the sync Client's, threaded; none falls back to the Redis code."""
    public = {
        n
        for n, f in vars(AsyncClient).items()
        if inspect.iscoroutinefunction(f) and not n.startswith("_")
    }
    assert public and {n for n in public if n not in vars(StoreInThread)} == set()
    assert type(AsyncClient(MemoryStore())) is StoreInThread


def test_it_answers_as_the_sync_client_and_closes():
    async def main() -> tuple[bool, str, type[BaseException] | None]:
        client = AsyncClient(MemoryStore())
        job_id = await client.enqueue(print, delay=60, job_id="a")
        paused = await client.pause(job_id)
        state = (await client.get(job_id)).state
        await client.close()
        await client.close()  # harmless
        try:
            await client.get(job_id)
        except ClientClosedError as exc:
            return paused, state, type(exc)
        return paused, state, None

    assert asyncio.run(main()) == (True, "paused", ClientClosedError)


def test_its_handles_are_awaited_for_results_and_failures():
    """In process: ``await handle`` is woken by the store's commit (results.md)."""
    from scheduler import JobFailed, Scheduler, task

    @task("tests.async_client.double")
    def double(n: int) -> int:
        if n < 0:
            raise ValueError("negative")
        return 2 * n

    store = MemoryStore()
    engine = Scheduler(2, store=store)

    async def main() -> tuple[list[int], str, object]:
        async with AsyncClient(store) as client:
            hs = [
                await client.enqueue("tests.async_client.double", kwargs={"n": i}) for i in range(5)
            ]
            got = [await h for h in hs]
            bad = await client.enqueue("tests.async_client.double", kwargs={"n": -1}, retry=None)
            try:
                await bad.result(timeout=5)
            except JobFailed as e:
                failed = f"{e.error_type}: {e.message}"
            return got, failed, await client.handle(hs[0]).result(timeout=1)

    try:
        assert asyncio.run(main()) == ([0, 2, 4, 6, 8], "ValueError: negative", 0)
    finally:
        engine.shutdown(wait=True, timeout=5)
