"""``AsyncClient``: ``Client`` for asyncio code (FastAPI, Starlette, aiohttp, an async job).

Every public method of ``Client`` has an awaitable twin with the same arguments, the same
validation and the same errors. Given a URL, it talks to Redis through ``redis.asyncio``
(stores/redis/async_store.py): no thread per call, and the operations are the sync
stores' own (stores/redis/ops.py and protocol/requests.py: which script, keys and arguments, how a
reply is read), so both clients behave alike. Every URL form works (``redis://``,
``rediss://``, ``unix://``, Sentinel, Cluster, ``shards=N``). One ``AsyncClient`` may be
shared by any number of tasks of one event loop. Given a ``Store`` object (a
``MemoryStore`` in tests) it calls the sync ``Client`` in a worker thread.

    async with AsyncClient("redis://127.0.0.1:6379/0", namespace="prod") as client:
        job_id = await client.enqueue("billing.invoice", delay="1h", kwargs={"id": 7})
        total = await client.enqueue("billing.total", kwargs={"month": 5})  # its result

``enqueue`` returns an ``AsyncJobHandle``: the job id (a ``str``) that ``await`` waits on
for the job's result (scheduler/handles.py, docs/results.md).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from scheduler import flow, keyrules, validation
from scheduler import tracing as trace_config
from scheduler.client import Client, ClosedStore, backfill_window, job_spec, job_specs, outcomes_of
from scheduler.client_flow import unknown_task
from scheduler.errors import EventLoopMismatchError, JobNotFoundError, StoreFullError
from scheduler.flow import FlowState, Limit, refuse_sharded
from scheduler.handles import AsyncJobHandle, threaded_watch
from scheduler.limit_usage import TOP_KEYS, Hold, ScopeUsage
from scheduler.model import Cron, Event, JobInfo, Quarantined, Reconciled
from scheduler.stores.base import Store
from scheduler.stores.redis.integrity.server_checks import not_interrupted

if TYPE_CHECKING:
    from scheduler.stores.redis.async_store import AsyncStore
    from scheduler.stores.redis.reading.listing import Page


log = logging.getLogger("duetime.client")


class AsyncClient:
    """Enqueue, steer and inspect a shared namespace from asyncio code; see ``Client``
    for what each method does and guarantees (it returns when the sync one would)."""

    def __new__(cls, redis_url: str | Store = "redis://127.0.0.1:6379/0", **_: Any) -> AsyncClient:
        if cls is AsyncClient and not isinstance(redis_url, str):
            return object.__new__(StoreInThread)  # a Store object: the sync Client, threaded
        return object.__new__(cls)

    def __init__(
        self,
        redis_url: str | Store = "redis://127.0.0.1:6379/0",
        *,
        namespace: str = "default",
        wait_replicas: int = 0,
        wait_timeout_ms: int = 100,
        shards: int | None = None,
        tracing: bool | None = None,
    ) -> None:
        """``tracing``: as ``Client``'s (docs/tracing.md)."""
        from scheduler.stores.redis.async_store import AsyncStore
        from scheduler.stores.redis.sharding.shards import shard_count_for

        assert isinstance(redis_url, str)  # a Store object makes a StoreInThread (__new__)
        self.store: AsyncStore = AsyncStore(
            redis_url,
            namespace,
            shards=shard_count_for(redis_url, shards),
            wait_replicas=wait_replicas,
            wait_timeout_ms=wait_timeout_ms,
        )
        self._loop: asyncio.AbstractEventLoop | None = None  # set by the first call
        self._tracing = trace_config.wanted(tracing)

    def _native(self) -> AsyncStore:
        """The store, on the event loop that owns its connections (the first it ran on)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop and not isinstance(self.store, ClosedStore):  # closed: says so
            if self._loop is not None:
                raise EventLoopMismatchError()
            self._loop = loop
        return self.store

    @staticmethod
    def _wall(st: AsyncStore) -> float:
        return st.clock.wall() if st.clock is not None else time.time()

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
    ) -> AsyncJobHandle:
        when = {"delay": delay, "at": at, "every": every, "anchor": anchor, "cron": cron}
        make = job_spec(
            task, when, tz=tz, job_id=job_id, kwargs=kwargs, allow_past=allow_past, **options
        )
        st = self._native()
        spec = make(self._wall(st))
        await st.checked(record=True)
        if not self._tracing:
            await st.add_many([spec])
            return AsyncJobHandle(spec.job_id, self._watch, self._info)
        with trace_config.enqueuing((spec,), "enqueue"):
            await st.add_many([spec])
        return AsyncJobHandle(spec.job_id, self._watch, self._info)

    def handle(self, job_id: str, invocation: float | int | str | None = None) -> AsyncJobHandle:
        """As ``Client.handle``: an awaitable handle of a job stored earlier."""
        return AsyncJobHandle(validation.job_id(job_id), self._watch, self._info, invocation)

    async def _watch(self, *args: Any) -> Any:
        from scheduler.stores.redis import async_results

        return await async_results.watch(self._native(), *args)

    async def _info(self, job_id: str) -> JobInfo | None:
        try:
            return await self.get(job_id)
        except JobNotFoundError:
            return None

    async def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[AsyncJobHandle]:
        st = self._native()
        specs = job_specs(jobs, self._wall(st))
        await st.checked(record=True)
        if self._tracing:
            with trace_config.enqueuing(specs, "enqueue_many"):
                await st.add_many(specs)
        else:
            await st.add_many(specs)
        return [AsyncJobHandle(spec.job_id, self._watch, self._info) for spec in specs]

    async def _flag(self, name: str, job_id: str) -> bool:
        from scheduler.stores.redis import ops

        jid, st = validation.job_id(job_id), self._native()
        layout = await st.checked()
        return bool(await st.run(getattr(ops, name)(layout.part(jid), jid)))

    async def cancel(self, job_id: str, *, interrupt: bool = False) -> bool:
        """As ``Client.cancel`` (``interrupt``: each replica running an invocation of the
        job is asked to stop it at its next lease renewal)."""
        prevented = await self._flag("cancel", job_id)
        if interrupt:
            try:
                await self._flag("interrupt", job_id)
            except StoreFullError as exc:  # as Client.cancel
                raise not_interrupted(exc, job_id) from exc
        return prevented

    async def pause(self, job_id: str) -> bool:
        return await self._flag("pause", job_id)

    async def resume(self, job_id: str) -> bool:
        return await self._flag("resume", job_id)

    async def trigger(self, job_id: str) -> bool:
        return await self._flag("trigger", job_id)

    async def backfill(
        self, job_id: str, start: dt.datetime | float, end: dt.datetime | float
    ) -> int:
        from scheduler.stores.redis import ops

        a, b = backfill_window(start, end)
        jid, st = validation.job_id(job_id), self._native()
        layout = await st.checked()
        return await st.run(ops.backfill(layout.part(jid), jid, a, b))

    async def get(self, job_id: str) -> JobInfo:
        from scheduler.stores.redis import ops

        jid, st = validation.job_id(job_id), self._native()
        layout = await st.checked()
        found = await st.run(ops.get(layout.part(jid), jid))
        if found is None:
            raise JobNotFoundError(job_id)
        return found

    async def jobs(self) -> list[JobInfo]:
        from scheduler.stores.redis import ops

        st = self._native()
        layout = await st.checked()
        each = [await st.run(ops.jobs(keys)) for keys in layout.parts]
        return ops.by_next_run(i for infos in each for i in infos)

    async def events(self, limit: int = 100) -> list[Event]:
        from scheduler.stores.redis import ops

        st = self._native()
        layout = await st.checked()
        each = [await st.run(ops.events(keys, limit)) for keys in layout.parts]
        return ops.merge_events(each, limit)

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
        from scheduler.stores.redis.reading import listing

        st = self._native()
        layout = await st.checked()
        return await st.run(
            listing.page(
                layout.parts, state, task=task, limit=limit, cursor=cursor, lane=lane, prefix=prefix
            )
        )

    async def retry(self, job_id: str) -> int:
        from scheduler.stores.redis import redo

        jid, st = validation.job_id(job_id), self._native()
        layout = await st.checked()
        return (await st.run(redo.retry_op(layout.part(jid), jid))).count()

    async def retry_failed(self, task: str | None = None) -> dict[str, int]:
        from scheduler.stores.redis import redo

        st = self._native()
        layout = await st.checked()
        return {r.job_id: r.queued for r in await st.run(redo.retry_failed_op(layout, task))}

    async def delete(self, job_id: str) -> bool:
        from scheduler.stores.redis import redo

        jid, st = validation.job_id(job_id), self._native()
        layout = await st.checked()
        return await st.run(redo.delete_op(layout.part(jid), jid))

    async def set_limit(self, scope: str, limit: Limit | None) -> bool:
        """As ``Client.set_limit``."""
        from scheduler.stores.redis import ops

        scope, limit = flow.declared(scope, limit)
        st = self._native()
        layout = await st.checked()
        refuse_sharded(len(layout.parts))
        return await st.run(ops.set_limit(layout.parts[0], scope, limit))

    async def limits(self) -> dict[str, Limit]:
        """As ``Client.limits``."""
        from scheduler.stores.redis import ops

        st = self._native()
        layout = await st.checked()
        return await st.run(ops.limits(layout.parts[0]))

    async def flow_of(self, key: str) -> FlowState:
        """As ``Client.flow_of``."""
        from scheduler.stores.redis import ops

        st = self._native()
        layout = await st.checked()
        return await st.run(ops.flow_of(layout.parts[0], validation.limit_key(key)))

    async def limit_usage(self, top: int = TOP_KEYS) -> list[ScopeUsage]:
        """As ``Client.limit_usage``."""
        from scheduler.stores.redis.reading import limits

        st = self._native()
        layout = await st.checked()
        if len(layout.parts) > 1:
            return []  # a sharded namespace refuses limits
        return await st.run(limits.usage(layout.parts[0], top))

    async def hold_of(self, job_id: str) -> Hold | None:
        """As ``Client.hold_of``."""
        from scheduler.stores.redis.reading import limits

        jid, st = validation.job_id(job_id), self._native()
        layout = await st.checked()
        return await st.run(limits.hold(layout.part(jid), jid))

    async def set_key_rule(
        self,
        template: str | None,
        *,
        task: str | None = None,
        lane: str | None = None,
        new_task: bool = False,
    ) -> bool:
        """As ``Client.set_key_rule``."""
        from scheduler.stores.redis import rulebook

        name, text = keyrules.declared(template, task, lane)
        st = self._native()
        layout = await st.checked()
        refuse_sharded(len(layout.parts), "key rules")
        if task is not None and template is not None and not new_task:
            bad = unknown_task(task, await st.run(rulebook.served(layout.parts[0])))
            if bad is not None:
                raise bad
        return await st.run(rulebook.set_rule(layout.parts[0], name, text))

    async def key_rules(self) -> dict[str, str]:
        """As ``Client.key_rules``."""
        from scheduler.stores.redis import rulebook

        st = self._native()
        layout = await st.checked()
        return await st.run(rulebook.rules(layout.parts[0]))

    async def quarantined(self) -> list[Quarantined]:
        from scheduler.stores.redis.integrity import upkeep

        st = self._native()
        layout = await st.checked()
        return [q for k in layout.parts for q in await st.run(upkeep.quarantined_op(k))]

    async def restore(self, entry_id: str) -> str:
        from scheduler.stores.redis.integrity import upkeep

        eid, st = validation.job_id(entry_id), self._native()
        layout = await st.checked()
        first = layout.part(eid)
        for keys in [first, *(k for k in layout.parts if k is not first)]:
            outcome = await st.run(upkeep.restore_op(keys, eid))
            if outcome != "missing":
                return outcome
        return "missing"

    async def purge_quarantined(self, entry_id: str = "*") -> int:
        from scheduler.stores.redis.integrity import upkeep

        eid = entry_id if entry_id == "*" else validation.job_id(entry_id)
        st = self._native()
        layout = await st.checked()
        return sum([await st.run(upkeep.purge_op(k, eid)) for k in layout.parts])

    async def reconcile(self, *, dry_run: bool = False) -> Reconciled:
        from scheduler.stores.redis.integrity import upkeep

        st = self._native()
        layout = await st.checked()
        each = [await st.run(upkeep.reconcile_op(k, dry_run)) for k in layout.parts]
        return upkeep.sum_reconciled(each)

    async def close(self) -> None:
        """Close the connections. Any later use raises ``ClientClosedError`` (redis.asyncio
        would reconnect silently, with a connection nobody closes); closing again is
        harmless."""
        if not isinstance(self.store, ClosedStore):
            store, self.store = self.store, ClosedStore("AsyncClient")  # type: ignore[assignment]
            if self._loop is None or self._loop is asyncio.get_running_loop():
                await store.close()
            else:  # asyncio.run(client.close()) at exit, after the loop that used it ended
                log.warning(
                    "AsyncClient.close() ran on another event loop than the one that used "
                    "it: that loop's connections cannot be closed from here (Python may warn "
                    "of them as unclosed); close the client inside the loop that uses it"
                )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class StoreInThread(AsyncClient):
    """``AsyncClient(store)`` for a ``Store`` object (a ``MemoryStore`` in tests): each
    method is the sync ``Client``'s, run in a worker thread (``asyncio.to_thread``), so it
    answers exactly as ``Client`` does over that store."""

    def __init__(
        self,
        redis_url: str | Store,
        *,
        namespace: str = "default",
        tracing: bool | None = None,
        **_: Any,
    ) -> None:
        assert not isinstance(redis_url, str)
        self.sync = Client(redis_url, namespace=namespace, tracing=tracing)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)  # idempotent
        self.sync.store = ClosedStore("AsyncClient")

    async def enqueue(self, task: str | Callable[..., Any], **kwargs: Any) -> AsyncJobHandle:
        job_id = await asyncio.to_thread(functools.partial(self.sync.enqueue, task, **kwargs))
        return self.handle(str(job_id))

    async def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[AsyncJobHandle]:
        ids = await asyncio.to_thread(self.sync.enqueue_many, jobs)
        return [self.handle(str(i)) for i in ids]

    def handle(self, job_id: str, invocation: float | int | str | None = None) -> AsyncJobHandle:
        watch = threaded_watch(lambda *args: outcomes_of(self.sync.store).watch(*args))
        return AsyncJobHandle(validation.job_id(job_id), watch, self._info, invocation)

    async def _info(self, job_id: str) -> JobInfo | None:
        return await asyncio.to_thread(lambda: self.sync.store.get(job_id))


def _in_thread(name: str) -> Callable[..., Any]:
    async def call(self: StoreInThread, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(functools.partial(getattr(self.sync, name), *args, **kwargs))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = getattr(AsyncClient, name).__doc__
    return call


StoreInThread.enqueue.__doc__ = AsyncClient.enqueue.__doc__
for _name in (
    "cancel",
    "pause",
    "resume",
    "trigger",
    "backfill",
    "get",
    "jobs",
    "events",
    "list_jobs",
    "retry",
    "retry_failed",
    "delete",
    "quarantined",
    "restore",
    "purge_quarantined",
    "reconcile",
    "set_limit",
    "limits",
    "flow_of",
    "limit_usage",
    "hold_of",
    "set_key_rule",
    "key_rules",
):
    setattr(StoreInThread, _name, _in_thread(_name))
