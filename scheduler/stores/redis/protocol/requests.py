"""The client-side operations of a shared namespace, written once, without I/O.

An operation (``ops.py``, ``reading/listing.py``, ``redo.py``, ``integrity/upkeep.py``,
``sharding/shards.py``) is a generator: it yields requests (run this Lua script, these
redis-py calls in one pipeline, adds, one SCAN step, a Lua text of its own, Redis's time) and is
sent each reply; its return
value is the result. It names no connection and never blocks, so the sync stores (``run``
below, on a ``RedisStore`` or ``ShardedStore``) and the asyncio executor
(``async_store.py``, on ``redis.asyncio``) run the same code: which script, which keys
and arguments, how a reply is parsed, how shards are merged. A request names the part
(shard index) it goes to.

    def cancel(job_id):                      # an operation
        return bool((yield Script(0, "cancel", (job_id,))))
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, TypeVar, cast

from scheduler.stores.redis.protocol import gateway
from scheduler.stores.redis.protocol.gateway import Lua

T = TypeVar("T")


@dataclass(frozen=True)
class Script:
    """Run ``lua/NAME.lua`` on part ``part`` with its prefix and time argument, then
    ``args``; the reply is the script's. Errors as ``RedisStore.call_script``."""

    part: int
    name: str
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Calls:
    """redis-py client methods (name, args, kwargs) sent in one pipeline to part
    ``part`` (every key one slot); the reply is the list of their replies. ``lenient``:
    an error reply (a key of the wrong type: garbage) comes back as its exception, in
    its place, instead of being raised (readouts: one bad key must not fail them all)."""

    part: int
    calls: tuple[tuple[str, tuple[Any, ...], dict[str, Any]], ...]
    lenient: bool = False


@dataclass(frozen=True)
class Scan:
    """One SCAN step from ``cursor`` on the server that holds part ``part`` (in a cluster:
    the node of ``slot_key``); the reply is (next cursor, keys)."""

    part: int
    cursor: int
    match: str
    count: int
    slot_key: str = field(default="")


@dataclass(frozen=True)
class Eval:
    """Run a Lua text that is not a lua/ file (``gateway.Lua``, e.g. upkeep.START_COUNT)
    on part ``part`` with KEYS ``keys`` and ARGV ``args``; the reply is the script's, an
    error reply raised as redis-py's error."""

    part: int
    script: Lua
    keys: tuple[str, ...]
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Adds:
    """add.lua for jobs whose arguments are ``args`` (``definitions.add_args``), on part
    ``part``, ``ADD_BATCH`` jobs a call in one round trip, each call with ``stamp`` (the
    key rules' stamp applied; None: unchecked); the reply is one item per job: add.lua's
    reply, or the store's error for it, in its place (adds.py). The lost-write check is
    done."""

    part: int
    args: tuple[list[Any], ...]
    stamp: str | None = None


@dataclass(frozen=True)
class Now:
    """Redis's time in epoch ms (a test store's fixed clock if it has one)."""

    part: int = 0


Request: TypeAlias = Script | Calls | Adds | Scan | Eval | Now
Op: TypeAlias = Generator[Request, Any, T]


def call(part: int, name: str, *args: Any, **kwargs: Any) -> Calls:
    """One redis-py call as a request."""
    return Calls(part, ((name, args, kwargs),))


def one(part: int, name: str, *args: Any, **kwargs: Any) -> Op[Any]:
    """One redis-py call; its reply."""
    replies = yield call(part, name, *args, **kwargs)
    return replies[0]


def run(store: Parted, op: Op[T]) -> T:
    """Run ``op`` on a sync store: each request on ``store.parts[request.part]`` (a
    single ``RedisStore``, a shard of a ``ShardedStore`` among them, takes them all)."""
    parts = store.parts
    try:
        request = next(op)
        while True:
            part = parts[request.part] if len(parts) > 1 else parts[0]
            request = op.send(_do(part, request))
    except StopIteration as stop:
        result: T = stop.value
        return result


def run_on(part: Part, op: Op[T]) -> T:
    """Run ``op`` on one part (every request goes to it)."""
    try:
        request = next(op)
        while True:
            request = op.send(_do(part, request))
    except StopIteration as stop:
        result: T = stop.value
        return result


class Parted(Protocol):
    """A sync store of one or more parts (``RedisStore``, ``ShardedStore``)."""

    @property
    def parts(self) -> Sequence[Part]: ...


class Part(Protocol):
    """What running a request needs of a sync store (``RedisStore``)."""

    @property
    def redis(self) -> Any: ...

    def call_script(self, name: str, *args: Any) -> Any: ...

    def reachable(self) -> AbstractContextManager[None]: ...

    def redis_now_ms(self) -> int: ...


class AddsPart(Part, Protocol):
    """A part that runs ``Adds`` (``RedisStore``; only the add path yields them)."""

    def send_adds(self, args: Sequence[list[Any]], stamp: str | None) -> list[Any]: ...


def _do(part: Part, request: Request) -> Any:
    if isinstance(request, Script):
        return part.call_script(request.name, *request.args)
    if isinstance(request, Adds):
        return cast(AddsPart, part).send_adds(request.args, request.stamp)
    with part.reachable():
        if isinstance(request, Calls):
            return pipelined(part.redis, request)
        if isinstance(request, Scan):
            return scan_step(part.redis, request)
        if isinstance(request, Eval):
            return gateway.call(part.redis, request.script, request.keys, request.args)
        return part.redis_now_ms()


def pipelined(r: Any, request: Calls) -> list[Any]:
    """The replies of ``request``'s calls on the sync client ``r``."""
    if len(request.calls) == 1 and not request.lenient:
        name, args, kwargs = request.calls[0]
        return [getattr(r, name)(*args, **kwargs)]
    with r.pipeline(transaction=False) as p:
        for name, args, kwargs in request.calls:
            getattr(p, name)(*args, **kwargs)
        return list(p.execute(raise_on_error=not request.lenient))


def scan_step(r: Any, s: Scan) -> tuple[int, list[str]]:
    """One SCAN step on the sync client ``r``; in Redis Cluster, on the node that holds
    the part's slot."""
    if not hasattr(r, "get_node_from_key"):
        nxt, keys = r.scan(s.cursor, match=s.match, count=s.count)
        return int(nxt), list(keys)
    node = r.get_node_from_key(s.slot_key)
    nxt, keys = r.scan(s.cursor, match=s.match, count=s.count, target_nodes=node)
    if isinstance(nxt, dict):  # the cluster client answers {node: cursor}
        nxt = next(iter(nxt.values()))
    return int(nxt), list(keys)
