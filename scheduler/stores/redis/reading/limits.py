"""The limits of a shared namespace, read (docs/flow-control.md, "Watching limits"): the
declared ones, where a key stands, what waits on each limit, what holds a job back. None
writes; each is pipelined reads of what the claim keeps anyway: the ``limits`` hash,
``flow:run``, each key's ``flow:win:<key>``, and the lanes' flow queues
(``lane_queues.py``: every keyed queue has a turn in ``turns:<lane>\\x1f<priority>``).

Cost of ``usage``: one pipeline for the lanes' levels and one for their turns (as
``duetime stats``), then one per ``CHUNK`` keys with due or running work: per key an
``LRANGE`` of its window, and per queue of it a ``ZCOUNT`` and a ``ZRANGE 0 0``. No SCAN.
The rule that turns them into figures is ``scheduler/limit_usage.py``'s, the in-process
store's too.
``RedisStore`` runs them (``flow_methods.py``), ``AsyncClient`` too.
"""

from __future__ import annotations

from typing import Any

from scheduler import flow, limit_usage
from scheduler.errors import JobNotFoundError
from scheduler.limit_usage import TOP_KEYS, Hold, KeySeen, ScopeUsage
from scheduler.stores.redis import ops
from scheduler.stores.redis.protocol import records, requests
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.protocol.requests import Calls, Now, Op
from scheduler.stores.redis.reading import lane_queues
from scheduler.stores.redis.reading.readable import AnyStore

CHUNK = 500  # keys read per pipeline


def usage(k: Keys, top: int = TOP_KEYS) -> Op[list[ScopeUsage]]:
    """What waits on each declared limit now (``limit_usage.usage``): [] without limits."""
    declared, lanes, running = yield Calls(
        k.shard,
        (
            ("hgetall", (k.limits,), {}),
            ("smembers", (k.lanes,), {}),
            ("hgetall", (k.flow_running,), {}),
        ),
        lenient=True,
    )
    limits = flow.decoded(_ok(declared, {}))
    if not limits:
        return []
    by_lane = yield from lane_queues.queues(k, sorted(str(x) for x in _ok(lanes, ())))
    queues: dict[str, list[str]] = {}
    for qs in by_lane.values():
        for q in qs:
            key = flow.parse_queue(q)[2]
            if key is not None:
                queues.setdefault(key, []).append(q)
    counts = {
        str(key): int(n) for key, n in _ok(running, {}).items() if records.is_int(n) and int(n) > 0
    }
    keys = sorted(
        key
        for key in set(queues) | set(counts)
        if any(s in limits for s in flow.scopes(key))  # governed by a declared limit
    )
    now = int((yield Now(k.shard)))
    seen = []
    for i in range(0, len(keys), CHUNK):
        part = keys[i : i + CHUNK]
        calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        for key in part:
            calls.append(("lrange", (k.window(key), 0, -1), {}))
            for q in queues.get(key, ()):
                calls.append(("zcount", (k.due(q), "-inf", now), {}))
                calls.append(("zrange", (k.due(q), 0, 0), {"withscores": True}))
        got = iter((yield Calls(k.shard, tuple(calls), lenient=True)))
        for key in part:
            seen.append(_seen(key, counts.get(key, 0), got, len(queues.get(key, ())), now))
    return limit_usage.usage(limits, seen, now, top)


def _seen(key: str, running: int, got: Any, n_queues: int, now: int) -> KeySeen:
    """One key's replies (its window, then a ZCOUNT and a head per queue) as a ``KeySeen``."""
    starts = tuple(int(t) for t in _ok(next(got), ()) if str(t).isdigit())
    waiting, oldest = 0, None
    for _ in range(n_queues):
        n, head = next(got), _ok(next(got), ())
        waiting += int(n) if isinstance(n, int) else 0
        for _member, score in head:
            if score <= now and (oldest is None or score < oldest):
                oldest = int(score)
    return KeySeen(key, running, starts, waiting, oldest)


def _ok(reply: Any, default: Any) -> Any:
    """A lenient pipeline's reply, or ``default`` for an error (a key of the wrong type)."""
    return default if reply is None or isinstance(reply, Exception) else reply


def hold(k: Keys, job_id: str) -> Op[Hold | None]:
    """What holds ``job_id`` back now (``limit_usage.hold``); ``JobNotFoundError`` if there
    is no such job."""
    info = yield from ops.get(k, job_id)
    if info is None:
        raise JobNotFoundError(job_id)
    if info.limit_key is None or info.state != "scheduled":
        return None
    state, now = yield from ops.flow_at(k, info.limit_key)
    return limit_usage.hold(info, state, now)


def gauges(store: AnyStore) -> dict[str, dict[str, float]]:
    """The metrics leader's gauges of each declared limit (``limit_usage.figures``); {} for
    a sharded namespace, which refuses limits."""
    shards = store.parts
    if len(shards) > 1:
        return {}
    return limit_usage.figures(requests.run_on(shards[0], usage(shards[0].keys, top=0)))
