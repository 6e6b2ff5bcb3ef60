"""Fenced writes to a caller's own Redis keys: one call of lua/fenced.lua through the
gateway, with the ledger key beside the caller's key, and its reply read.

Guarantee (the script's): the write is applied only while ``fence`` is the newest fence
the key's ledger has seen for the invocation; else ``StaleFenceError`` and nothing written.
The public helpers, which find the running invocation, are ``workers.effects.redis``;
this module takes the invocation's fields explicitly and knows nothing of a job.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from scheduler.errors import StaleFenceError
from scheduler.stores.redis.protocol import gateway, script_args, scripts

OPS = ("set", "hset", "xadd")
LEDGER_SUFFIX = ":fence"


@cache
def script() -> gateway.Lua:
    """fenced.lua as the gateway sends it (its SHA1 computed once)."""
    return scripts.sendable("fenced")


def hash_tag(key: str) -> str | None:
    """The part of ``key`` Redis Cluster hashes when it has a hash tag (``{...}``, non
    empty, the first ``{`` to the first ``}`` after it), else None."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return key[start + 1 : end] if start >= 0 and end > start + 1 else None


def ledger_key(key: str) -> str:
    """The ledger beside ``key``, in its cluster slot: ``<key>:fence`` when ``key`` has a
    hash tag (the ledger shares it), else ``{<key>}:fence`` (its tag is the whole key,
    which is what Redis hashes for a key without one). ``ValueError`` for a key with a
    ``}`` and no hash tag, whose slot no derived name shares: pass the ledger key."""
    if not isinstance(key, str) or not key:
        raise TypeError(f"a fenced write's key must be a non-empty str, got {key!r}")
    if hash_tag(key) is not None:
        return key + LEDGER_SUFFIX
    if "}" in key:
        raise ValueError(
            f"key {key!r} has a '}}' but no hash tag, so no ledger name shares its cluster "
            "slot: pass ledger= (a key in the same slot), or give the key a {tag}"
        )
    return "{" + key + "}" + LEDGER_SUFFIX


def call_of(
    key: str,
    op: str,
    args: Sequence[Any],
    *,
    invocation_id: str,
    fence: int,
    ledger: str | None = None,
    keep_ms: int | None = None,
) -> tuple[list[str], list[Any]]:
    """The call's KEYS (the key, its ledger) and ARGV, checked."""
    if op not in OPS:
        raise ValueError(f"a fenced write is one of {', '.join(OPS)}, got {op!r}")
    if keep_ms is not None and (isinstance(keep_ms, bool) or keep_ms <= 0):
        raise ValueError(f"the ledger's keep time must be > 0 ms or None, got {keep_ms!r}")
    route = [key, ledger_key(key) if ledger is None else ledger]
    return route, script_args.fenced(invocation_id, fence, op, keep_ms, args)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def reply_of(reply: Any, *, job_id: str, scheduled_ms: int, fence: int, key: str) -> str | None:
    """The entry id an xadd added (or had added), None for set and hset; raises
    ``StaleFenceError`` for a refused write."""
    code = _text(reply[0])
    if code == "stale":
        raise StaleFenceError(job_id, scheduled_ms, fence, int(reply[1]), f"the ledger of {key}")
    if code != "ok":
        raise RuntimeError(f"fenced.lua answered {reply!r}: expected ok or stale")
    return _text(reply[2]) if len(reply) > 2 else None


def write(
    client: Any,
    key: str,
    op: str,
    args: Sequence[Any],
    *,
    job_id: str,
    scheduled_ms: int,
    fence: int,
    ledger: str | None = None,
    keep_ms: int | None = None,
) -> str | None:
    """One fenced write on a sync redis-py client (``Redis``, ``RedisCluster``): see
    ``reply_of``. An error reply (a key of another type, bad input) is raised as
    redis-py's ``ResponseError``, nothing written."""
    inv = f"{job_id}@{scheduled_ms}"
    route, argv = call_of(
        key, op, args, invocation_id=inv, fence=fence, ledger=ledger, keep_ms=keep_ms
    )
    reply = gateway.call(client, script(), route, argv)
    return reply_of(reply, job_id=job_id, scheduled_ms=scheduled_ms, fence=fence, key=key)


async def awrite(
    client: Any,
    key: str,
    op: str,
    args: Sequence[Any],
    *,
    job_id: str,
    scheduled_ms: int,
    fence: int,
    ledger: str | None = None,
    keep_ms: int | None = None,
) -> str | None:
    """``write`` on a ``redis.asyncio`` client."""
    inv = f"{job_id}@{scheduled_ms}"
    route, argv = call_of(
        key, op, args, invocation_id=inv, fence=fence, ledger=ledger, keep_ms=keep_ms
    )
    reply = await gateway.acall(client, script(), route, argv)
    return reply_of(reply, job_id=job_id, scheduled_ms=scheduled_ms, fence=fence, key=key)
