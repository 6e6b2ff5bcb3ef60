"""Which shard a job lives in, and the namespace's fixed shard count.

A sharded namespace (sharding/sharded.py) keeps each job in shard ``crc32(job_id) mod N``: a
stable hash (not Python's per-process ``hash()``), the same in every process and version.
N must therefore never change for a namespace: jobs would be looked for in the wrong
shard (cancel, get and upserts would miss them). N is recorded in shard 0's ``shards``
key by the first sharded store that uses the namespace; a namespace that holds data but
no record was written unsharded, so it counts as N = 1. Every store checks it
(``check_count``) and refuses a different N with a ``ShardCountError`` that says which N
the namespace has.
"""

from __future__ import annotations

import zlib
from typing import Any

from scheduler.errors import ShardCountError
from scheduler.stores.redis.integrity.server_checks import handshake_refused, layout_refused
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.protocol.requests import Calls, Op, call, one, pipelined
from scheduler.stores.redis.protocol.urls import MAX_SHARDS, split_shards

__all__ = ["MAX_SHARDS", "shard_of", "shard_count", "check_count"]


def shard_of(job_id: str, shards: int) -> int:
    """The shard of ``job_id`` among ``shards``: ``crc32(utf-8 id) mod shards``."""
    return zlib.crc32(job_id.encode("utf-8")) % shards if shards > 1 else 0


def shard_count(value: object) -> int:
    """A shard count: an int from 1 to MAX_SHARDS, else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SHARDS:
        raise ValueError(f"shards must be an integer from 1 to {MAX_SHARDS}, got {value!r}")
    return value


def check_count(client: Any, keys: Keys, where: str, *, record: bool = True) -> bool:
    """Given shard 0's keys (other shards: nothing to do), raise ``ShardCountError``
    unless ``keys.count`` is the namespace's shard count. A namespace with neither a
    record nor data gets ``keys.count`` recorded if ``record`` (writers; one shard records
    nothing: the unsharded layout needs no record). True once the count is settled (a
    reader of an empty, unrecorded namespace gets False: nothing to compare yet)."""
    op = count_op(keys, where, record=record)
    try:
        request = next(op)
        while True:
            request = op.send(pipelined(client, request))  # type: ignore[arg-type]
    except StopIteration as stop:
        return bool(stop.value)
    except Exception as exc:  # a connection's set-up refused (a database the server lacks)
        told = handshake_refused(exc, where)
        if told is None:
            raise
        raise told from exc


def count_op(keys: Keys, where: str, *, record: bool = True) -> Op[bool]:
    """``check_count`` as an operation (protocol/requests.py); in the same round trip, a
    namespace a newer duetime wrote (its data layout) is refused (``StoreConfigError``):
    its readers and replicas of this version would misread it."""
    if keys.shard != 0:
        return True
    shards = keys.count
    asked: tuple[tuple[str, tuple[str], dict[str, Any]], ...] = (
        ("get", (keys.shards,), {}),
        ("get", (keys.layout,), {}),
    )
    recorded, layout = yield Calls(0, asked, lenient=True)
    if isinstance(recorded, Exception):
        raise recorded
    refusal = None if isinstance(layout, Exception) else layout_refused(layout)
    if refusal is not None:  # (a layout key of another type: the scripts name it, corrupt)
        raise refusal
    if recorded is None:
        if (yield from one(0, "exists", keys.layout)):
            recorded = "1"  # data written before any sharded store: one shard
        elif shards == 1 or not record:
            return shards == 1
        else:
            yield call(0, "set", keys.shards, str(shards), nx=True)
            recorded = yield from one(0, "get", keys.shards)
    if int(recorded) != shards:
        raise ShardCountError(
            f"namespace {keys.prefix!r} at {where} has {int(recorded)} shard(s), but this "
            f"store was given {shards}: a namespace's shard count never changes (jobs are "
            f"placed by a hash of their id). Give {int(recorded)}: ?shards={int(recorded)} in "
            f"the URL, DUETIME_SHARDS={int(recorded)}, or --shards {int(recorded)} where a "
            "command takes it; or use another namespace"
        )
    return True


def shard_count_for(redis_url: str | Any, shards: int | None) -> int:
    """The shard count: ``shards``, else the URL's ``shards=N``, else 1 (both given must
    agree)."""
    n = shards
    if isinstance(redis_url, str):
        _, from_url = split_shards(redis_url)
        if n is not None and from_url is not None and n != from_url:
            raise ValueError(f"two shard counts: shards={n} and the URL's shards={from_url}")
        n = n if n is not None else from_url
    return shard_count(1 if n is None else n)
