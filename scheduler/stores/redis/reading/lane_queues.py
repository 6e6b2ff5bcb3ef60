"""The queues of a shared namespace's lanes, read: a lane's own due set and its flow
queues (docs/flow-control.md: one per priority, one per limit key with pending work, each
of those listed by its turn in ``turns:<lane>\\x1f<priority>``). What every readout that
counts or lists a lane's pending invocations reads (``stats``, ``ls``, the console,
``queue_depths``), so that jobs with a priority or a key are counted where they wait.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from scheduler.flow import SEP, queue_of
from scheduler.stores.redis.protocol import requests
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.protocol.requests import Calls, Op


def queues(k: Keys, lanes: Iterable[str]) -> Op[dict[str, list[str]]]:
    """Each lane of ``lanes``: its queues' names (``k.due(name)`` is each one's due set),
    its own first."""
    names = list(lanes)
    out = {lane: [lane] for lane in names}
    if not names:
        return out
    levels = yield Calls(k.shard, tuple(("smembers", (k.levels(lane),), {}) for lane in names))
    pairs = [
        (lane, int(p))
        for lane, got in zip(names, levels, strict=True)
        for p in sorted(str(x) for x in got or ())
        if p.lstrip("-").isdigit()
    ]
    if not pairs:
        return out
    turns = yield Calls(
        k.shard, tuple(("zrange", (k.turns(f"{lane}{SEP}{p}"), 0, -1), {}) for lane, p in pairs)
    )
    for (lane, p), keys in zip(pairs, turns, strict=True):
        if p != 0:
            out[lane].append(queue_of(lane, p, None))
        out[lane] += [queue_of(lane, p, str(key)) for key in keys or () if str(key)]
    return out


def depths(part: Any, now_ms: int) -> dict[str, tuple[int, int]]:
    """Per lane of the ``lanes`` index: pending invocations in all its queues, and how
    many are due at ``now_ms`` (``QueueDepths``)."""
    k = part.keys
    lanes = sorted(str(lane) for lane in part.redis.smembers(k.lanes))
    by_lane = requests.run(part, queues(k, lanes))
    with part.redis.pipeline(transaction=False) as p:
        for qs in by_lane.values():
            for q in qs:
                p.zcard(k.due(q))
                p.zcount(k.due(q), "-inf", now_ms)
        got = iter(p.execute())
    out = {}
    for lane, qs in by_lane.items():
        pairs = [(int(next(got)), int(next(got))) for _ in qs]
        out[lane] = (sum(a for a, _ in pairs), sum(b for _, b in pairs))
    return out
