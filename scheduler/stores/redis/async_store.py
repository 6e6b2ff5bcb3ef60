"""``AsyncStore``: the producer's and inspector's side of a shared namespace on
``redis.asyncio``, for ``AsyncClient``. It runs the same operations as the sync stores
(ops.py, reading/listing.py, redo.py, integrity/upkeep.py, sharding/shards.py: generators
of requests, protocol/requests.py); only the execution of a request is its own: a script
through protocol/gateway.py (``arun``, the sync store's rules), redis-py calls in one
pipeline, a SCAN step, Redis's TIME.
Errors are the sync store's (server_checks.unreachable / refused).

Every URL form of the sync stores (``redis://``, ``rediss://``, ``unix://``,
``redis+sentinel://``, ``redis+cluster://``, ``shards=N``); ``wait_replicas`` as there.
One ``AsyncStore`` may be shared by any number of tasks (redis.asyncio's pool gives each
command its own connection). The lost-write check after an add is integrity/replication.py's (a
``seq`` counter found below one this client was given: logged, a ``data_loss`` event,
the counter raised); not here: the periodic sentinel re-query (redis-py's asyncio
Sentinel finds the primary again on each new connection).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from functools import cache
from typing import Any, TypeVar

from scheduler import validation
from scheduler.clock import Clock
from scheduler.model import AddResult, JobSpec
from scheduler.stores.redis import adds, rulebook
from scheduler.stores.redis.integrity.checks import eviction_cause
from scheduler.stores.redis.integrity.replication import (
    FAILOVER,
    RAISE,
    Waiter,
    event_fields,
    log_data_loss,
    lost_writes_detail,
    seq_seen,
)
from scheduler.stores.redis.integrity.server_checks import (
    UNREACHABLE,
    EvictionCheck,
    refused,
    unreachable,
)
from scheduler.stores.redis.ops import Layout
from scheduler.stores.redis.protocol import gateway, script_args, scripts, urls
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.protocol.requests import (
    Adds,
    Calls,
    Eval,
    Now,
    Op,
    Request,
    Scan,
    Script,
)
from scheduler.stores.redis.sharding import shards

T = TypeVar("T")
RESEND_RETRIES = 2  # as RedisStore's
# The most store operations in flight at once on one client; more wait their turn.
# redis.asyncio's pool holds 100 connections and refuses the next ("Too many
# connections"), so 200 tasks enqueueing at once through one shared AsyncClient failed.
IN_FLIGHT = 64


@cache
def _script(name: str) -> gateway.Lua:
    """lua/NAME.lua as the gateway sends it (made once per process)."""
    return scripts.sendable(name)


class AsyncStore:
    """A namespace of ``shards`` shards (1: unsharded) at ``redis_url``, on
    ``redis.asyncio``. ``await run(op)`` runs an operation; ``add_many`` pipelines adds."""

    def __init__(
        self,
        redis_url: str,
        namespace: str = "default",
        *,
        shards: int = 1,
        payload_limit: int = validation.DEFAULT_PAYLOAD_LIMIT,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 100,
        clock: Clock | None = None,
    ) -> None:
        self._r: Any = urls.connect(
            redis_url,
            aio=True,
            decode_responses=True,
            **urls.resend_policy(RESEND_RETRIES, aio=True),
        )
        self.url = urls.safe(redis_url)
        self.namespace = namespace
        self.layout = Layout.of(namespace, shards)
        self.payload_limit = payload_limit
        self.waiter = Waiter(self._r, wait_replicas, wait_timeout_ms)
        self._counted = shards == 1  # a sharded namespace's count is checked once
        self._eviction = EvictionCheck()  # the policy, checked before writes (cached)
        self._checking: asyncio.Lock | None = None  # one check at a time, made in the loop
        self.clock = clock  # tests only: its time replaces Redis TIME (as RedisStore's)
        self.seq_high = [0] * len(self.layout.parts)  # per shard: the highest seq added
        self.rules = [rulebook.RuleCache() for _ in self.layout.parts]  # key rules applied
        self.lost_writes = 0
        self.data_loss_alarms = 0
        self._slots: asyncio.Semaphore | None = None  # IN_FLIGHT, made in the running loop
        self.results: Any = None  # the results subscriber (async_results.py), on first watch

    @property
    def redis(self) -> Any:
        """The redis.asyncio client (decode_responses=True)."""
        return self._r

    async def checked(self, *, record: bool = False) -> Layout:
        """The layout, once the namespace's shard count was checked against it (writers
        ``record`` it in a new namespace: ``ShardedStore._count``)."""
        if not self._counted:
            self._counted = await self.run(
                shards.count_op(self.layout.parts[0], self.url, record=record)
            )
        if record and self._eviction.due():  # a writer: an evicting Redis would lose jobs
            await self._check_eviction()
        return self.layout

    async def _check_eviction(self) -> None:
        """The producer's check of the eviction policy (``EvictionCheck``): one task asks
        (in a turn of its own), the others waiting at the same time take its answer."""
        import redis

        if self._checking is None:
            self._checking = asyncio.Lock()
        async with self._checking, self._turn():
            if not self._eviction.due():  # answered while this task waited
                return
            try:
                info: Any = await self._r.info("memory")
            except redis.ResponseError as exc:
                info = exc
            except UNREACHABLE as exc:
                raise unreachable(exc, self.url) from exc
            self._eviction.judge(info, self.url)

    def _turn(self) -> asyncio.Semaphore:
        """One of IN_FLIGHT turns: an operation holds one while it talks to Redis."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(IN_FLIGHT)
        return self._slots

    async def run(self, op: Op[T]) -> T:
        """Run ``op`` (protocol/requests.py): each request awaited in turn; the op's result."""
        async with self._turn():
            return await self._drive(op)

    async def _drive(self, op: Op[T]) -> T:
        """``run`` within a turn its caller holds."""
        try:
            request = next(op)
            while True:
                request = op.send(await self._do(request))
        except StopIteration as stop:
            result: T = stop.value
            return result

    async def _do(self, request: Request) -> Any:
        try:
            if isinstance(request, Script):
                return await self._send(request)
            if isinstance(request, Adds):
                return await self._add_batch(request.part, request.args, request.stamp)
            if isinstance(request, Calls):
                return await self._calls(request)
            if isinstance(request, Scan):
                return await self._scan(request)
            if isinstance(request, Eval):
                return await gateway.acall(self._r, request.script, request.keys, request.args)
            assert isinstance(request, Now)
            if self.clock is not None:
                return round(self.clock.now() * 1000)
            sec, usec = await self._r.time()
            return int(sec) * 1000 + int(usec) // 1000
        except UNREACHABLE as exc:
            raise unreachable(exc, self.url) from exc

    def _trip(
        self, keys: Keys, calls: Sequence[tuple[str, Sequence[Any]]], writes: int, raises: bool
    ) -> gateway.Trip:
        """Scripts ``calls`` (name, args after the prefix and time) on the part of ``keys``,
        then WAIT with ``wait_replicas`` (``writes`` writes); ``raises`` as gateway.Trip."""
        head = script_args.head(keys.prefix, None if self.clock is None else self.clock.now())
        sent = [(_script(name), [*head, *args]) for name, args in calls]
        return gateway.Trip(sent, [keys.epoch], self.waiter.wait(writes), raises)

    async def _send(self, s: Script) -> Any:
        import redis

        trip = self._trip(self.layout.parts[s.part], [(s.name, s.args)], 1, raises=True)
        try:
            return (await gateway.arun(self._r, trip))[0]
        except redis.exceptions.ResponseError as exc:
            raise refused(exc, self.url) from exc

    async def _calls(self, request: Calls) -> list[Any]:
        if len(request.calls) == 1 and not request.lenient:
            name, args, kwargs = request.calls[0]
            return [await getattr(self._r, name)(*args, **kwargs)]
        async with self._r.pipeline(transaction=False) as p:
            for name, args, kwargs in request.calls:
                getattr(p, name)(*args, **kwargs)
            return list(await p.execute(raise_on_error=not request.lenient))

    async def _scan(self, s: Scan) -> tuple[int, list[str]]:
        if not urls.is_cluster_client(self._r):
            nxt, keys = await self._r.scan(s.cursor, match=s.match, count=s.count)
            return int(nxt), list(keys)
        node = self._r.get_node_from_key(s.slot_key)
        nxt, keys = await self._r.scan(s.cursor, match=s.match, count=s.count, target_nodes=node)
        if isinstance(nxt, dict):  # the cluster client answers {node: cursor}
            nxt = next(iter(nxt.values()))
        return int(nxt), list(keys)

    async def add_many(self, specs: Sequence[JobSpec]) -> list[AddResult]:
        """Store ``specs`` (adds.py: key rules applied, add.lua calls of ``ADD_BATCH`` jobs),
        one round trip per shard holding some, in one turn; each add atomic on its own, the
        first refusal raised (the other jobs were stored). The layout must be ``checked``."""
        groups: dict[int, list[int]] = defaultdict(list)
        for n, spec in enumerate(specs):
            groups[shards.shard_of(spec.job_id, len(self.layout.parts))].append(n)
        out: list[AddResult | None] = [None] * len(specs)
        async with self._turn():  # the shards' batches: one turn, a connection per shard
            replies = await asyncio.gather(
                *(
                    self._drive(
                        adds.add(
                            self.layout.parts[i],
                            [specs[n] for n in members],
                            self.payload_limit,
                            self.rules[i],
                        )
                    )
                    for i, members in groups.items()
                )
            )
        for members, results in zip(groups.values(), replies, strict=True):
            for n, result in zip(members, results, strict=True):
                out[n] = result
        return [r for r in out if r is not None]

    async def _add_batch(
        self, part: int, args: Sequence[list[Any]], stamp: str | None
    ) -> list[Any]:
        """``requests.Adds``: add.lua for ``args`` on shard ``part`` in one round trip, each
        call with ``stamp``; one item per job, its reply or the store's error (adds.send)."""
        keys, high = self.layout.parts[part], self.seq_high[part]
        calls = [("add", call) for call in script_args.add_calls(args, stamp)]
        try:
            items = adds.per_job(
                len(args), await gateway.arun(self._r, self._trip(keys, calls, len(args), False))
            )
            await self._after_add(part, high, [r for r in items if not isinstance(r, Exception)])
        except UNREACHABLE as exc:
            raise unreachable(exc, self.url) from exc
        return [adds.store_error(x, self.url) if isinstance(x, Exception) else x for x in items]

    async def _after_add(self, part: int, high: int, replies: list[Any]) -> None:
        """The sync store's lost-write check (ReplicationWatch.after_add), for shard
        ``part``: ``high`` is its seq high-water mark when the adds were sent."""
        seen = seq_seen(replies)
        if seen is None:
            return
        before, after = seen
        self.seq_high[part] = max(self.seq_high[part], after)
        if before >= high:
            return
        self.lost_writes += high - before
        self.data_loss_alarms += 1
        keys = self.layout.parts[part]
        old = await gateway.acall(self._r, RAISE, [keys.prefix + "seq"], [self.seq_high[part]])
        detail = lost_writes_detail(before, high, int(old))
        try:
            cause = eviction_cause(await self._r.info("memory", "stats"))
        except Exception:  # noqa: BLE001 - the usual cause, then
            cause = FAILOVER
        log_data_loss(self.url, detail, cause)
        if cause != FAILOVER:
            detail = f"{detail}; cause: {cause}"
        async with self._r.pipeline(transaction=False) as p:
            p.xadd(keys.events, event_fields("data_loss", detail), maxlen=10_000, approximate=True)
            p.hincrby(keys.stats, "data_loss", 1)
            await p.execute()

    async def close(self) -> None:
        if self.results is not None:
            await self.results.stop()
        """Close the pool (and the sentinel connections, if any)."""
        await self._r.aclose()
        manager = getattr(getattr(self._r, "connection_pool", None), "sentinel_manager", None)
        for s in getattr(manager, "sentinels", []):
            await s.aclose()
