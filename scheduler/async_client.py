"""``AsyncClient``: ``Client`` for asyncio code (FastAPI, Starlette, aiohttp, an async job).

Every public method of ``Client`` has an awaitable twin with the same arguments, the same
validation and the same errors. This first version runs each call of the sync ``Client``
in a worker thread (``asyncio.to_thread``), so a call never blocks the event loop, and one
``AsyncClient`` may be shared by any number of tasks (the Redis connection pool is
thread-safe). Every URL form works (Sentinel, Cluster, shards), as for ``Client``.

    async with AsyncClient("redis://127.0.0.1:6379/0", namespace="prod") as client:
        job_id = await client.enqueue("billing.invoice", delay="1h", kwargs={"id": 7})

Not yet: calls on ``redis.asyncio`` itself (no thread per call); see issue 14.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from scheduler.client import Client
from scheduler.model import Cron, Event, JobInfo, Quarantined, Reconciled
from scheduler.stores.base import Store

if TYPE_CHECKING:
    from scheduler.stores.redis.listing import Page


class AsyncClient:
    """Enqueue, steer and inspect a shared namespace from asyncio code; see ``Client``
    for what each method does and guarantees (it returns when the sync one would)."""

    def __init__(
        self,
        redis_url: str | Store = "redis://127.0.0.1:6379/0",
        *,
        namespace: str = "default",
        wait_replicas: int = 0,
        wait_timeout_ms: int = 100,
        shards: int | None = None,
    ) -> None:
        self.sync = Client(
            redis_url,
            namespace=namespace,
            wait_replicas=wait_replicas,
            wait_timeout_ms=wait_timeout_ms,
            shards=shards,
        )

    async def enqueue(
        self,
        task: str | Callable[..., Any],
        *,
        kwargs: Mapping[str, Any] | None = None,
        delay: float | str | None = None,
        at: dt.datetime | float | None = None,
        every: float | str | None = None,
        anchor: dt.datetime | float | None = None,
        cron: str | Cron | None = None,
        tz: str | None = None,
        job_id: str | None = None,
        allow_past: bool = False,
        **options: Any,
    ) -> str:
        return await asyncio.to_thread(
            self.sync.enqueue,
            task,
            kwargs=kwargs,
            delay=delay,
            at=at,
            every=every,
            anchor=anchor,
            cron=cron,
            tz=tz,
            job_id=job_id,
            allow_past=allow_past,
            **options,
        )

    async def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[str]:
        return await asyncio.to_thread(self.sync.enqueue_many, list(jobs))

    async def cancel(self, job_id: str) -> bool:
        return await asyncio.to_thread(self.sync.cancel, job_id)

    async def pause(self, job_id: str) -> bool:
        return await asyncio.to_thread(self.sync.pause, job_id)

    async def resume(self, job_id: str) -> bool:
        return await asyncio.to_thread(self.sync.resume, job_id)

    async def trigger(self, job_id: str) -> bool:
        return await asyncio.to_thread(self.sync.trigger, job_id)

    async def backfill(
        self, job_id: str, start: dt.datetime | float, end: dt.datetime | float
    ) -> int:
        return await asyncio.to_thread(self.sync.backfill, job_id, start, end)

    async def get(self, job_id: str) -> JobInfo:
        return await asyncio.to_thread(self.sync.get, job_id)

    async def jobs(self) -> list[JobInfo]:
        return await asyncio.to_thread(self.sync.jobs)

    async def events(self, limit: int = 100) -> list[Event]:
        return await asyncio.to_thread(self.sync.events, limit)

    async def list_jobs(
        self,
        state: str = "scheduled",
        *,
        task: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        lane: str | None = None,
        prefix: str | None = None,
    ) -> Page:
        return await asyncio.to_thread(
            lambda: self.sync.list_jobs(
                state, task=task, limit=limit, cursor=cursor, lane=lane, prefix=prefix
            )
        )

    async def retry(self, job_id: str) -> int:
        return await asyncio.to_thread(self.sync.retry, job_id)

    async def retry_failed(self, task: str | None = None) -> dict[str, int]:
        return await asyncio.to_thread(self.sync.retry_failed, task)

    async def delete(self, job_id: str) -> bool:
        return await asyncio.to_thread(self.sync.delete, job_id)

    async def quarantined(self) -> list[Quarantined]:
        return await asyncio.to_thread(self.sync.quarantined)

    async def restore(self, entry_id: str) -> str:
        return await asyncio.to_thread(self.sync.restore, entry_id)

    async def purge_quarantined(self, entry_id: str = "*") -> int:
        return await asyncio.to_thread(self.sync.purge_quarantined, entry_id)

    async def reconcile(self, *, dry_run: bool = False) -> Reconciled:
        return await asyncio.to_thread(lambda: self.sync.reconcile(dry_run=dry_run))

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
