"""Fenced writes to your own Redis keys (redis-py, sync and async; the ``redis`` extra).

Guarantee: ``fenced_set``, ``fenced_hset`` and ``fenced_xadd`` write ``key`` only while
the invocation's fence is the newest that the key's ledger has seen for its occurrence,
checked and written in one Lua script (atomic); a stale fence raises ``StaleFenceError``
and writes nothing. The write is an upsert keyed by the invocation: ``set`` and ``hset``
overwrite (the newest owner's value stays), ``xadd`` adds the invocation's entry once (a
re-run finds it and adds nothing), so the effect exists once.

The ledger is a hash beside the key (``ledger_key(key)``: ``{<key>}:fence``, or
``<key>:fence`` for a key with a hash tag, so both share a Redis Cluster slot), one field
per invocation that wrote the key. It protects writes to that key only: a job that writes
several keys is checked per key, and a write made without these helpers is not checked.
``keep`` (seconds) lets the ledger expire after the last write; a ledger gone forgets the
fences it saw. The client is any redis-py client you pass (yours, not duetime's):
``Redis``, ``RedisCluster``, ``redis.asyncio.Redis`` for the ``a``-prefixed helpers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from scheduler.stores.redis.protocol import fenced
from workers.effects import Invocation, fence_of

__all__ = [
    "afenced_hset",
    "afenced_set",
    "afenced_xadd",
    "fenced_hset",
    "fenced_set",
    "fenced_xadd",
    "ledger_key",
]

ledger_key = fenced.ledger_key


def _ms(seconds: float | None, what: str) -> int | None:
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"{what} must be seconds (a number) or None, got {seconds!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{what} must be finite and > 0 seconds, got {seconds!r}")
    return max(1, math.ceil(seconds * 1000))


def _pairs(mapping: Mapping[Any, Any], what: str) -> list[Any]:
    if not isinstance(mapping, Mapping) or not mapping:
        raise ValueError(f"{what} needs a non-empty mapping of field to value")
    if len(mapping) > 2000:
        raise ValueError(f"{what} writes at most 2000 fields a call, got {len(mapping)}")
    return [x for item in mapping.items() for x in item]


def _entry(entry: str | None) -> str:
    if entry is None:  # fenced.lua answers every xadd with its entry id
        raise RuntimeError("fenced.lua answered an xadd without an entry id")
    return entry


def _call(
    op: str,
    key: str,
    args: list[Any],
    ledger: str | None,
    keep: float | None,
    invocation: Invocation | None,
    what: str,
) -> dict[str, Any]:
    f = fence_of(invocation, what)
    return dict(
        key=key,
        op=op,
        args=args,
        job_id=f.job_id,
        scheduled_ms=f.scheduled_ms,
        fence=f.fence,
        ledger=ledger,
        keep_ms=_ms(keep, "keep"),
    )


def fenced_set(
    client: Any,
    key: str,
    value: Any,
    *,
    ttl: float | None = None,
    ledger: str | None = None,
    keep: float | None = None,
    invocation: Invocation | None = None,
) -> None:
    """``SET key value [PX ttl]`` if the running invocation's (or ``invocation``'s) fence
    is the newest the key's ledger has seen for its occurrence; else ``StaleFenceError``
    and nothing written. ``ttl``: seconds the value lives (rounded up to the ms)."""
    px = _ms(ttl, "ttl")
    kw = _call(
        "set", key, [value, "" if px is None else px], ledger, keep, invocation, "fenced_set()"
    )
    fenced.write(client, **kw)


def fenced_hset(
    client: Any,
    key: str,
    mapping: Mapping[Any, Any],
    *,
    ledger: str | None = None,
    keep: float | None = None,
    invocation: Invocation | None = None,
) -> None:
    """``HSET key field value ...`` (other fields of the hash untouched) under the same
    check as ``fenced_set``."""
    kw = _call(
        "hset", key, _pairs(mapping, "fenced_hset()"), ledger, keep, invocation, "fenced_hset()"
    )
    fenced.write(client, **kw)


def fenced_xadd(
    client: Any,
    key: str,
    fields: Mapping[Any, Any],
    *,
    ledger: str | None = None,
    keep: float | None = None,
    invocation: Invocation | None = None,
) -> str:
    """``XADD key * field value ...`` once per invocation, under the same check as
    ``fenced_set``: the entry's id; a re-run (equal or newer fence) gets the id its
    occurrence added before and adds nothing."""
    kw = _call(
        "xadd", key, _pairs(fields, "fenced_xadd()"), ledger, keep, invocation, "fenced_xadd()"
    )
    return _entry(fenced.write(client, **kw))


async def afenced_set(
    client: Any,
    key: str,
    value: Any,
    *,
    ttl: float | None = None,
    ledger: str | None = None,
    keep: float | None = None,
    invocation: Invocation | None = None,
) -> None:
    """``fenced_set`` on a ``redis.asyncio`` client."""
    px = _ms(ttl, "ttl")
    kw = _call(
        "set", key, [value, "" if px is None else px], ledger, keep, invocation, "afenced_set()"
    )
    await fenced.awrite(client, **kw)


async def afenced_hset(
    client: Any,
    key: str,
    mapping: Mapping[Any, Any],
    *,
    ledger: str | None = None,
    keep: float | None = None,
    invocation: Invocation | None = None,
) -> None:
    """``fenced_hset`` on a ``redis.asyncio`` client."""
    kw = _call(
        "hset", key, _pairs(mapping, "afenced_hset()"), ledger, keep, invocation, "afenced_hset()"
    )
    await fenced.awrite(client, **kw)


async def afenced_xadd(
    client: Any,
    key: str,
    fields: Mapping[Any, Any],
    *,
    ledger: str | None = None,
    keep: float | None = None,
    invocation: Invocation | None = None,
) -> str:
    """``fenced_xadd`` on a ``redis.asyncio`` client."""
    kw = _call(
        "xadd", key, _pairs(fields, "afenced_xadd()"), ledger, keep, invocation, "afenced_xadd()"
    )
    return _entry(await fenced.awrite(client, **kw))
