"""The history the web console's charts draw, kept beside the capped event stream: what
each replica did per minute, and which replicas there are (their version and heartbeat).

* ``minute:<m>`` (``m`` = epoch seconds // 60) is a hash with fields ``<replica>|<figure>``:
  ``claims``, ``succeeded``, ``failed``, ``retried`` (counts in that minute, added with
  HINCRBY) and ``lag_p50``/``lag_p99`` (the replica's dispatch lag of that minute so far,
  ms, overwritten). It expires ``KEEP`` seconds after its minute began (a day).
* ``replicas`` is a hash: replica -> JSON ``{"version", "host", "pid", "started",
  "heartbeat", "workers"}``; a replica that stops cleanly removes its field, a dead one's
  field is pruned by the next writer once its heartbeat is a day old.

Both are written by a replica's flush (``scheduler/recorder.py``, every ``FLUSH`` seconds,
one pipeline), never per job: a completed job costs nothing here. Both live on shard 0 of a
sharded namespace. Plain commands the replica's ACL user has (HINCRBY, HSET, HDEL,
PEXPIRE, HGETALL); the reads need HGETALL and MGET (the monitor user has them).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from scheduler.stores.redis.reading import fleet
from scheduler.stores.redis.reading.readable import AnyStore, Part

KEEP = 86_400  # seconds a minute's figures are kept
FLUSH = 10.0  # seconds between a replica's flushes
COUNTS = ("claims", "succeeded", "failed", "retried")
LAGS = ("lag_p50", "lag_p99")


class Minute(TypedDict):
    """The namespace's figures of one minute (all replicas): counts summed; the lag
    percentiles are the worst replica's (percentiles of different replicas do not add)."""

    minute: int  # epoch seconds // 60
    claims: int
    succeeded: int
    failed: int
    retried: int
    lag_p50: float | None
    lag_p99: float | None


class ReplicaInfo(TypedDict):
    """A replica as it announced itself, and whether its live key (``replica:<id>``,
    refreshed by every claim) still exists."""

    id: str
    version: str
    host: str
    pid: int
    started: float
    heartbeat: float
    workers: int
    lanes: dict[str, int] | None  # lane -> workers; None: a replica that did not say
    alive: bool  # its last claim is recent (reading/fleet.py: within 2 x its resync)
    last_seen: float | None  # seconds since its last claim; None: its live key expired


def _shard0(store: AnyStore) -> Part:
    return store.parts[0]


def record(
    store: AnyStore,
    owner: str,
    minute: int,
    counts: Mapping[str, int],
    lags: Mapping[str, float | None],
    info: Mapping[str, Any],
    prune_before: float | None = None,
) -> None:
    """One flush of replica ``owner``: add ``counts`` to its figures of ``minute``, set its
    lag percentiles of that minute, and refresh its announcement (``info`` with the
    heartbeat); replicas whose heartbeat is older than ``prune_before`` are dropped."""
    part = _shard0(store)
    key, r = part.keys.minute(minute), part.redis
    stale: list[str] = []
    if prune_before is not None:
        for name, raw in r.hgetall(part.keys.replicas).items():
            if _heartbeat(raw) < prune_before and str(name) != owner:
                stale.append(str(name))
    with r.pipeline(transaction=False) as p:
        for name in COUNTS:
            if counts.get(name):
                p.hincrby(key, f"{owner}|{name}", int(counts[name]))
        for name in LAGS:
            value = lags.get(name)
            if value is not None:
                p.hset(key, f"{owner}|{name}", f"{value:.3f}")
        p.pexpire(key, (minute * 60 + KEEP) * 1000 - _now_ms(info))
        p.hset(part.keys.replicas, owner, json.dumps(dict(info), separators=(",", ":")))
        if stale:
            p.hdel(part.keys.replicas, *stale)
        p.execute()


def _now_ms(info: Mapping[str, Any]) -> int:
    return round(float(info.get("heartbeat", 0)) * 1000)


def _heartbeat(raw: str | bytes) -> float:
    try:
        return float(json.loads(raw).get("heartbeat", 0))
    except (ValueError, TypeError, AttributeError):
        return 0.0


def forget(store: AnyStore, owner: str) -> None:
    """Replica ``owner`` stopped cleanly: drop its announcement (its figures stay)."""
    part = _shard0(store)
    part.redis.hdel(part.keys.replicas, owner)


def era(store: AnyStore) -> str:
    """Shard 0's epoch ("" if missing: Redis lost the namespace's data): minutes read in
    one era say nothing of another, so the console's chart cache keeps one era's."""
    shard = _shard0(store)
    return str(shard.redis.get(shard.keys.epoch) or "")


def minutes(store: AnyStore, first: int, last: int) -> list[Minute]:
    """The namespace's figures of minutes ``first``..``last`` (inclusive), one per minute,
    oldest first (a minute nobody wrote has zero counts and no lag)."""
    part = _shard0(store)
    with part.redis.pipeline(transaction=False) as p:
        for m in range(first, last + 1):
            p.hgetall(part.keys.minute(m))
        replies = p.execute()
    return [summed(m, h) for m, h in zip(range(first, last + 1), replies, strict=True)]


def summed(minute: int, fields: Mapping[str, str]) -> Minute:
    """One minute's hash as the namespace's figures."""
    out: Minute = {
        "minute": minute,
        "claims": 0,
        "succeeded": 0,
        "failed": 0,
        "retried": 0,
        "lag_p50": None,
        "lag_p99": None,
    }
    for field, raw in fields.items():
        _, _, name = str(field).rpartition("|")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            continue
        if name in COUNTS:
            out[name] += int(value)  # type: ignore[literal-required]
        elif name in LAGS:
            old = out[name]  # type: ignore[literal-required]
            out[name] = value if old is None else max(old, value)  # type: ignore[literal-required]
    return out


def replicas(store: AnyStore) -> list[ReplicaInfo]:
    """Every announced replica, by id, with whether it is alive and when it last claimed
    (``fleet.replicas_all``: the same judgement as ``stats`` and the metrics)."""
    part = _shard0(store)
    raw = part.redis.hgetall(part.keys.replicas)
    names = sorted(str(n) for n in raw)
    live = {r["id"]: r for r in fleet.replicas_all(store)} if names else {}
    out: list[ReplicaInfo] = []
    for name in names:
        seen = live.get(name)
        try:
            data = json.loads(raw[name])
        except (ValueError, TypeError):
            data = {}
        out.append(
            {
                "id": name,
                "version": str(data.get("version", "?")),
                "host": str(data.get("host", "?")),
                "pid": int(data.get("pid", 0) or 0),
                "started": float(data.get("started", 0) or 0),
                "heartbeat": float(data.get("heartbeat", 0) or 0),
                "workers": int(data.get("workers", 0) or 0),
                "lanes": _lanes(data.get("lanes")),
                "alive": seen is not None and seen["alive"],
                "last_seen": None if seen is None else seen["last_seen"],
            }
        )
    return out


def _lanes(value: Any) -> dict[str, int] | None:
    if not isinstance(value, dict):
        return None
    return {str(k): int(v) for k, v in value.items() if isinstance(v, int)}


def unserved_lanes(store: AnyStore, with_work: Iterable[str], alive: Iterable[str]) -> list[str]:
    """The lanes of ``with_work`` that no live replica serves, by what the replicas
    announced (``alive``: the ids of the live replicas). Empty when that cannot be told:
    no replica alive (the count says so), or one that did not announce its lanes."""
    announced = {r["id"]: r["lanes"] for r in replicas(store)}
    alive = list(alive)
    if not alive or any(announced.get(rid) is None for rid in alive):
        return []
    served = {lane for rid in alive for lane in announced[rid] or {}}
    return sorted(set(with_work) - served)
