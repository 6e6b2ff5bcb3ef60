"""Recipe: a plain asyncio program that embeds a replica (``Scheduler.serve()``) and runs
``async def`` jobs; cancelling the serve task is a clean shutdown (docs/async.md).

    DUETIME_REDIS_URL=redis://127.0.0.1:6379/0 python deploy/example/recipes/asyncio_embed.py
"""

from __future__ import annotations

import asyncio
import os

from scheduler import RedisStore, Scheduler, task

done = asyncio.Event()


@task("recipes.fetch")
async def fetch(url: str) -> int:
    await asyncio.sleep(0.01)  # stands in for an HTTP call
    return len(url)


async def main(seconds: float = 1.0) -> None:
    url = os.environ.get("DUETIME_REDIS_URL", "redis://127.0.0.1:6379/0")
    namespace = os.environ.get("DUETIME_NAMESPACE", "recipes")
    store = RedisStore(url, namespace)
    engine = Scheduler(2, store=store)
    serving = asyncio.create_task(engine.serve(shutdown_timeout=10, exiting=True))
    engine.after("recipes.fetch", 0.1, job_id="fetch-1", kwargs={"url": "https://example.org"})
    await asyncio.sleep(seconds)
    serving.cancel()  # stop claiming; running jobs finish; then the task ends
    try:
        await serving
    except asyncio.CancelledError:
        pass
    print(store.get("fetch-1"))
    store.close()


if __name__ == "__main__":
    asyncio.run(main())
