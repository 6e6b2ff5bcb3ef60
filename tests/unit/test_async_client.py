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
