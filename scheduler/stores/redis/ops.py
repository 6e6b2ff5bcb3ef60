"""The producer and inspector operations of a shared namespace, sans I/O
(protocol/requests.py): what ``RedisStore``/``ShardedStore`` and ``AsyncClient``'s executor
(async_store.py) both run.

Per part (one shard's ``Keys``): add, cancel, pause, resume, trigger, backfill, get,
jobs, events. Across parts: ``Layout`` (which part holds a job) and the merges of a
sharded namespace (``by_next_run``, ``merge_events``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from scheduler import flow
from scheduler.flow import FlowState, Limit
from scheduler.model import AddResult, Event, JobInfo, JobSpec
from scheduler.stores.redis.claiming import calendar_plans
from scheduler.stores.redis.protocol import definitions, records, script_args
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.protocol.requests import Calls, Now, Op, Scan, Script, one
from scheduler.stores.redis.reading import snapshots
from scheduler.stores.redis.sharding import shards as sharding

LIVE = ("scheduled", "running", "paused")  # finished jobs stay a day, but are not listed
LISTED = (*LIVE, "malformed")  # a job hash that does not parse is listed, not hidden


class Layout:
    """The parts of a namespace (``Keys`` of each shard, shard 0 first)."""

    def __init__(self, parts: Sequence[Keys]) -> None:
        self.parts = list(parts)

    @classmethod
    def of(cls, namespace: str, shards: int) -> Layout:
        return cls([Keys(namespace, i, shards) for i in range(shards)])

    def part(self, job_id: str) -> Keys:
        """The keys of the shard that holds ``job_id``."""
        return self.parts[sharding.shard_of(job_id, len(self.parts))]


class _NeedNow(BaseException):
    """add.lua's arguments need Redis's time (a calendar job): ask for it, then again."""


def _no_now() -> int:
    raise _NeedNow


def add_args(keys: Keys, spec: JobSpec, payload_limit: int) -> Op[list[Any]]:
    """add.lua's arguments for ``spec`` (``definitions.add_args``; Redis's time is asked only
    for a calendar job); raises before anything is sent if it cannot be stored."""
    try:
        return definitions.add_args(spec, payload_limit, _no_now)
    except _NeedNow:
        now = yield Now(keys.shard)
        return definitions.add_args(spec, payload_limit, lambda: int(now))


def add(keys: Keys, spec: JobSpec, payload_limit: int) -> Op[tuple[AddResult, Any]]:
    """Store ``spec`` (add.lua): its ``AddResult`` and the raw reply (integrity/replication.py
    checks its sequence numbers)."""
    args = yield from add_args(keys, spec, payload_limit)
    reply = yield Script(keys.shard, "add", tuple(args))
    return records.add_result(reply), reply


def _flag(keys: Keys, script: str, job_id: str) -> Op[bool]:
    return bool((yield Script(keys.shard, script, script_args.job(job_id))))


def cancel(keys: Keys, job_id: str) -> Op[bool]:
    return (yield from _flag(keys, "cancel", job_id))


def interrupt(keys: Keys, job_id: str) -> Op[int]:
    """Mark the job's running invocations to be stopped (the ``interrupt`` field, read by
    the replicas' heartbeats: ``interrupted``); how many run. A plain flag, not a script:
    nothing is decided by it but a running job's cancel token, and add.lua's replacing
    ``DEL`` clears it with the job."""
    row = yield from one(keys.shard, "hmget", keys.job(job_id), *records.job_fields(("running",)))
    (running,) = records.job_row(("running",), row)
    count = int(running) if records.is_int(running) else 0
    if count > 0:
        yield from one(keys.shard, "hset", keys.job(job_id), "interrupt", "1")
    return count


def interrupted(keys: Keys, job_ids: Iterable[str]) -> Op[set[str]]:
    """Which of ``job_ids`` (all of this part) were marked by ``interrupt``."""
    ids = list(job_ids)
    if not ids:
        return set()
    hgets: dict[str, Any] = {}
    flags = yield Calls(keys.shard, tuple(("hget", (keys.job(j), "interrupt"), hgets) for j in ids))
    return {j for j, flag in zip(ids, flags, strict=True) if flag == "1"}


def pause(keys: Keys, job_id: str) -> Op[bool]:
    return (yield from _flag(keys, "pause", job_id))


def resume(keys: Keys, job_id: str) -> Op[bool]:
    return (yield from _flag(keys, "resume", job_id))


def trigger(keys: Keys, job_id: str) -> Op[bool]:
    return (yield from _flag(keys, "trigger", job_id))


def set_limit(keys: Keys, scope: str, limit: Limit | None) -> Op[bool]:
    """limit.lua: declare (None: remove) the limit of ``scope`` (validated by the caller)."""
    text = "" if limit is None else limit.encode()
    return bool((yield Script(keys.shard, "limit", script_args.limit(scope, text))))


def limits(keys: Keys) -> Op[dict[str, Limit]]:
    """Every declared limit (a stored one that does not parse is left out)."""
    return flow.decoded((yield from one(keys.shard, "hgetall", keys.limits)))


def flow_of(keys: Keys, key: str) -> Op[FlowState]:
    """Where limit key ``key`` stands: its governing limit, running, recent starts, full."""
    state, _ = yield from flow_at(keys, key)
    return state


def flow_at(keys: Keys, key: str) -> Op[tuple[FlowState, int]]:
    """``flow_of`` and the time (ms) it was read at."""
    declared, running, starts = yield Calls(
        keys.shard,
        (
            ("hgetall", (keys.limits,), {}),
            ("hget", (keys.flow_running, key), {}),
            ("lrange", (keys.window(key), 0, -1), {}),
        ),
        lenient=True,  # a key of the wrong type (garbage) reads as empty, never a failed readout
    )
    now = int((yield Now(keys.shard)))
    ints = [] if isinstance(starts, Exception) else [int(t) for t in starts if str(t).isdigit()]
    count = int(running) if records.is_int(running) else 0
    limits = {} if isinstance(declared, Exception) else flow.decoded(declared)
    return flow.state(key, limits, count, ints, now), now


def backfill(keys: Keys, job_id: str, start: float, end: float) -> Op[int]:
    """Read the job's schedule, compute the occurrences of [start, end), and let
    backfill.lua queue those that never ran (see its header)."""
    fields = calendar_plans.BACKFILL_FIELDS
    row = yield from one(keys.shard, "hmget", keys.job(job_id), *records.job_fields(fields))
    h = dict(zip(fields, records.job_row(fields, row), strict=True))
    if not h.get("def") or not h.get("gen"):
        return 0
    spec = definitions.decode(h["def"], job_id)
    times = calendar_plans.occurrences(spec, h, start, end)
    args = tuple(script_args.backfill(job_id, h["gen"], times))
    queued = int((yield Script(keys.shard, "backfill", args)))
    if queued < 0:
        raise ValueError(
            f"job {job_id!r} changed while the backfill was computed (it was "
            "replaced, cancelled or finished); nothing was queued"
        )
    return queued


def pending_occurrence(keys: Keys, job_id: str) -> Op[float | None]:
    """A series' pending occurrence (epoch s; its waiting re-runs aside), None if none."""
    row = yield from one(keys.shard, "hmget", keys.job(job_id), *records.job_fields(("e", "next")))
    e, nxt = records.job_row(("e", "next"), row)
    return int(nxt) / 1000 if e and records.is_int(nxt) else None


def get(keys: Keys, job_id: str) -> Op[JobInfo | None]:
    """A snapshot of the job, None if there is none."""
    h, skips, dead, running = yield Calls(
        keys.shard,
        (
            ("hgetall", (keys.job(job_id),), {}),
            ("lrange", (keys.skips(job_id), 0, -1), {}),
            ("lrange", (keys.dead(job_id), 0, -1), {}),
            ("hgetall", (keys.running,), {}),
        ),
        lenient=True,
    )
    tokens = [] if isinstance(running, Exception) else records.tokens_of(running, job_id)
    leases: dict[str, float] = {}
    if tokens:  # its invocations' leases: when each ends unless renewed
        calls: tuple[tuple[str, tuple[Any, ...], dict[str, Any]], ...] = tuple(
            ("zscore", (keys.lease, t), {}) for t in tokens
        )
        scores = yield Calls(keys.shard, calls, lenient=True)
        leases = {
            t: ms / 1000 for t, ms in zip(tokens, scores, strict=True) if isinstance(ms, float)
        }
    return snapshots.from_replies(job_id, h, skips, dead, running, leases)


def jobs(keys: Keys) -> Op[list[JobInfo]]:
    """Every live job of the part (a SCAN of its job keys: an operator's call)."""
    start, cursor, ids = len(keys.job("")), 0, set[str]()
    while True:
        cursor, found = yield Scan(keys.shard, cursor, keys.job("*"), 1000, keys.lanes)
        ids.update(k[start:] for k in found)
        if cursor == 0:
            break
    infos = []
    for job_id in sorted(ids):
        info = yield from get(keys, job_id)
        if info is not None and info.state in LISTED:
            infos.append(info)
    return by_next_run(infos)


def by_next_run(infos: Iterable[JobInfo]) -> list[JobInfo]:
    """Live jobs by next run (jobs without one last)."""
    live = [i for i in infos if i.state in LISTED]
    return sorted(live, key=lambda i: (i.next_run is None, i.next_run or 0.0))


def events(keys: Keys, limit: int = 100) -> Op[list[Event]]:
    """The part's most recent ``limit`` events, oldest first (``limit`` stream entries
    hold at least ``limit`` events: a batch call's entry holds several)."""
    if limit <= 0:
        return []
    rows = yield from one(keys.shard, "xrevrange", keys.events, count=limit)
    return [e for _, f in reversed(rows) for e in records.events(f)][-limit:]


def merge_events(each: Iterable[list[Event]], limit: int) -> list[Event]:
    """The most recent ``limit`` of several parts' events, oldest first (equal times keep
    part order)."""
    merged = [e for events in each for e in events]
    return sorted(merged, key=lambda e: e.at)[-limit:] if limit > 0 else []
