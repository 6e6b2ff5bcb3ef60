"""Read-only inspection of a shared (Redis) namespace: the queries behind ``duetime ls``,
``show``, ``stats`` and ``events``. Plain functions over a ``RedisStore``; none writes.
A ``ShardedStore`` (sharding/sharded.py) is read shard by shard and merged: ``stats`` sums
the shards, a job's events come from its shard, recent events are merged by time
(following the stream, ``follow``, reads one shard's stream: shard 0's).

Times are epoch seconds (floats). "Now" is Redis ``TIME``, the clock that decides what
is due, so a client whose clock is off still reports the right due-now counts. The
``*_json`` helpers turn records into plain JSON values: each time as epoch seconds and
as an ISO 8601 string in UTC (``*_iso``); the text helpers at the end render them for
people (local time).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypedDict

from scheduler import timeinput
from scheduler.model import Event
from scheduler.stores.redis.protocol import definitions, records, requests, urls
from scheduler.stores.redis.protocol.keys import LIVE_FIELDS
from scheduler.stores.redis.reading import fleet, lane_queues, limits
from scheduler.stores.redis.reading.readable import AnyStore, Part

SCAN_CHUNK = 1000  # stream entries read per XREVRANGE while looking for one job's events


class Entry(NamedTuple):
    """One event of the namespace's stream, with the id (``<ms>-<n>``) of the stream entry
    that holds it (a batch script's entry holds several events: they share it)."""

    id: str
    event: Event


class Stats(TypedDict):
    """What ``stats`` returns (plain JSON values)."""

    namespace: str
    now: float  # Redis TIME, epoch seconds
    now_iso: str
    queue_depths: dict[str, int]  # lane -> pending invocations (ZCARD due:<lane>)
    due_now: dict[str, int]  # lane -> pending invocations already due
    running: int  # invocations claimed and not yet ended (HLEN running)
    counters: dict[str, int]  # event kind -> count since the namespace began
    replicas: list[fleet.Replica]  # with a live key; each says if it is alive, last seen
    replicas_alive: int  # those alive: last claim within 2 x resync (reading/fleet.py)
    data_loss_alarms: int  # times a replica found the namespace's data gone
    lag_ms: dict[str, float]  # dispatch lag of recent claims: p50, p90, p99, max, samples
    # task -> invocations waiting because no live replica serves the task (parked:<task>)
    waiting: dict[str, int]
    serves: dict[str, list[str] | None]  # live replica -> the tasks it serves (None: every)


# ---- the queue and the fleet ------------------------------------------------------------


def parts(store: AnyStore) -> Sequence[Part]:
    """The shards of a ``ShardedStore``; ``[store]`` for a ``RedisStore``."""
    return store.parts


def of_job(store: AnyStore, job_id: str) -> Part:
    """The (shard) store that holds ``job_id``."""
    return store.shard(job_id)


def redis_now(store: AnyStore) -> float:
    """Redis ``TIME`` as epoch seconds."""
    sec, usec = store.redis.time()
    return int(sec) + int(usec) / 1e6


def lanes(store: Part) -> list[str]:
    """Lanes that ever had a job in the namespace (the ``lanes`` set), sorted; the default
    lane too when it holds due entries (the set may be lost: eviction, a restart)."""
    names = {str(lane) for lane in store.redis.smembers(store.keys.lanes)}
    if "default" not in names and store.redis.exists(store.keys.due("default")):
        names.add("default")
    return sorted(names)


def queue_depths(store: Part) -> dict[str, int]:
    """Pending invocations per lane (ZCARD of each of its queues' ``due:<queue>``)."""
    by_lane = requests.run(store, lane_queues.queues(store.keys, lanes(store)))
    with store.redis.pipeline(transaction=False) as p:
        for qs in by_lane.values():
            for q in qs:
                p.zcard(store.keys.due(q))
        got = iter(p.execute())
    return {lane: sum(int(next(got)) for _ in qs) for lane, qs in by_lane.items()}


def due_now(store: Part, now: float | None = None) -> dict[str, int]:
    """Pending invocations per lane that are due at ``now`` (default: Redis ``TIME``),
    i.e. waiting for a free worker or a replica."""
    by_lane = requests.run(store, lane_queues.queues(store.keys, lanes(store)))
    now_ms = round((redis_now(store) if now is None else now) * 1000)
    with store.redis.pipeline(transaction=False) as p:
        for qs in by_lane.values():
            for q in qs:
                p.zcount(store.keys.due(q), "-inf", now_ms)
        got = iter(p.execute())
    return {lane: sum(int(next(got)) for _ in qs) for lane, qs in by_lane.items()}


def running_count(store: AnyStore) -> int:
    """Invocations currently claimed by some replica and not ended (HLEN ``running``, every
    shard): what every readout calls running (``stats``, ``top``, the console,
    ``duetime_running``; ``ls --state running`` lists their jobs, ``show`` each one's)."""
    return sum(int(part.redis.hlen(part.keys.running)) for part in parts(store))


class Running(NamedTuple):
    """An invocation claimed by a replica and not yet ended."""

    job_id: str
    scheduled: float  # epoch seconds
    attempt: int
    fence: int
    owner: str  # the replica that holds it
    lease_until: float | None = None  # epoch seconds; None: no lease (or it just ended)


def running(store: AnyStore) -> list[Running]:
    """Every invocation of the namespace that is running now (all shards), by token, with
    its lease deadline."""
    out = []
    for part in parts(store):
        with part.redis.pipeline(transaction=False) as p:
            p.hgetall(part.keys.running)
            p.zrange(part.keys.lease, 0, -1, withscores=True)
            entries, leases = p.execute()
        until = {str(token): float(ms) / 1000 for token, ms in leases}
        for token, r in sorted(records.running_entries(entries).items()):
            owner = records.owner_of(token)
            lease = until.get(str(token))
            out.append(Running(r.job_id, r.scheduled, r.attempt, r.fence, owner, lease))
    return out


def gauges(store: AnyStore) -> dict[str, Any]:
    """What the metrics leader's namespace gauges show (``duetime run --metrics-port``),
    summed over every shard, from the same queries as ``stats`` and the console (only
    what the gauges need: ``stats`` also reads thousands of events)."""
    depths: dict[str, int] = {}
    events: dict[str, int] = {}
    for part in parts(store):
        for lane, n in queue_depths(part).items():
            depths[lane] = depths.get(lane, 0) + n
        for kind, n in counters(part).items():
            events[kind] = events.get(kind, 0) + n
    return {
        "queue_depth": dict(sorted(depths.items())),
        "running": running_count(store),
        "replicas": sum(1 for r in fleet.replicas_all(store) if r["alive"]),
        "events": dict(sorted(events.items())),
        "quarantined": quarantined_count(store),
        "waiting": fleet.waiting_all(store),
        "limits": limits.gauges(store),  # scope -> its figures (duetime_limit_*)
    }


def definition(store: AnyStore, job_id: str) -> Any:
    """The job's definition (a ``JobSpec``), None if there is no such job or it does not
    parse (``duetime doctor`` quarantines it)."""
    part = of_job(store, job_id)
    text = part.redis.hget(part.keys.job(job_id), "def")
    if text is None:
        return None
    try:
        return definitions.decode(text, job_id)
    except (ValueError, KeyError, TypeError):
        return None


def quarantined_count(store: AnyStore) -> int:
    """Entries in the quarantine (all shards; the legacy list of older versions too)."""
    with store.redis.pipeline(transaction=False) as p:
        for part in parts(store):
            p.hlen(part.keys.quarantined)
            p.llen(part.keys.quarantine)
        return sum(int(n) for n in p.execute())


def counters(store: Part) -> dict[str, int]:
    """The ``stats`` hash: one counter per event kind, sorted by kind."""
    raw: Mapping[str, str] = store.redis.hgetall(store.keys.stats)
    # a counter that is not an integer (garbage) is left out, never a failed readout; the
    # live count is not an event kind (doctor reads it)
    return {
        kind: int(n)
        for kind, n in sorted(raw.items())
        if records.is_int(n) and kind not in LIVE_FIELDS
    }


def data_loss_alarms(store: Part) -> int:
    """How many times a replica found the namespace's epoch gone (Redis lost data)."""
    n = store.redis.hget(store.keys.stats, "data_loss")
    return int(n) if records.is_int(n) else 0


def stats(store: AnyStore) -> Stats:
    """Everything ``duetime stats`` shows, as plain JSON values (summed over shards)."""
    shards = parts(store)
    if len(shards) > 1:
        return merge_stats([stats(s) for s in shards])
    store = shards[0]
    now = redis_now(store)
    alive = fleet.replicas(store, now)
    counts = counters(store)
    return {
        "namespace": store.namespace,
        "now": now,
        "now_iso": iso(now) or "",
        "queue_depths": queue_depths(store),
        "due_now": due_now(store, now),
        "running": running_count(store),
        "counters": counts,
        "replicas": alive,
        "replicas_alive": sum(1 for r in alive if r["alive"]),
        "data_loss_alarms": counts.get("data_loss", 0),
        "lag_ms": claim_lag(store),
        "waiting": fleet.waiting(store),
        "serves": fleet.serves(store, {r["id"] for r in alive}),
    }


def merge_stats(each: list[Stats]) -> Stats:
    """One namespace's ``Stats`` from its shards' (sums; lag over the union of samples is
    not recoverable from percentiles, so the worst shard's figures are shown)."""

    def add(maps: list[dict[str, int]]) -> dict[str, int]:
        out: dict[str, int] = {}
        for m in maps:
            for k, v in m.items():
                out[k] = out.get(k, 0) + v
        return dict(sorted(out.items()))

    seen = fleet.merged(r for st in each for r in st["replicas"])
    lags = [st["lag_ms"] for st in each if st["lag_ms"].get("samples")]
    lag: dict[str, float] = max(lags, key=lambda m: m["p99"]) if lags else {"samples": 0.0}
    if lags:
        lag = {**lag, "samples": float(sum(m["samples"] for m in lags))}
    counts = add([st["counters"] for st in each])
    first = each[0]
    return {
        "namespace": first["namespace"],
        "now": first["now"],
        "now_iso": first["now_iso"],
        "queue_depths": add([st["queue_depths"] for st in each]),
        "due_now": add([st["due_now"] for st in each]),
        "running": sum(st["running"] for st in each),
        "counters": counts,
        "replicas": seen,
        "replicas_alive": sum(1 for r in seen if r["alive"]),
        "data_loss_alarms": counts.get("data_loss", 0),
        "lag_ms": lag,
        "waiting": add([st["waiting"] for st in each]),
        "serves": {o: t for st in each for o, t in st["serves"].items()},
    }


def claim_lag(store: Part, window: int = 5000) -> dict[str, float]:
    """Dispatch lag (claim time minus when the job became claimable: the later of its
    scheduled time and the enqueue, retry or resume time the claimed event records; Redis
    time) of the claims among the last ``window`` events: p50, p90, p99 and max in ms, and
    the sample count."""
    rows = store.redis.xrevrange(store.keys.events, count=window)  # >= `window` events
    events = [e for _, f in reversed(rows) for e in records.events(f)][-window:]
    lags = sorted(
        round((e.at - max(e.scheduled, e.ready or e.scheduled)) * 1000)
        for e in events
        if e.kind == "claimed" and e.scheduled is not None
    )
    if not lags:
        return {"samples": 0}

    def pct(p: float) -> float:
        return float(lags[min(len(lags) - 1, int(p * len(lags)))])

    return {
        "p50": pct(0.50),
        "p90": pct(0.90),
        "p99": pct(0.99),
        "max": float(lags[-1]),
        "samples": float(len(lags)),
    }


# ---- events -----------------------------------------------------------------------------


def last_event_id(store: AnyStore) -> str:
    """The id of the newest entry of the stream (``0-0`` if it is empty)."""
    newest = store.redis.xrevrange(parts(store)[0].keys.events, count=1)
    return str(newest[0][0]) if newest else "0-0"


class Run(TypedDict):
    """One ended run of a job: claimed, then its outcome."""

    scheduled: float | None
    attempt: int | None
    started: float | None  # the claim, epoch seconds (None: not known)
    outcome: str  # succeeded, failed (for good), retried, interrupted or lease_lost
    duration: float | None  # seconds from the claim to the outcome (None: not known)


RUN_ENDS = frozenset({"succeeded", "failed", "retried", "interrupted"})


def recent_runs(store: AnyStore, job_id: str, count: int = 10) -> list[Run]:
    """The job's last ``count`` runs, newest first: a recurring job's from its own list
    (``stored_runs``, the last 20), another's from the event stream (those whose claim
    and outcome are both still there; one backward pass over the capped stream)."""
    stored = stored_runs(store, job_id)
    if stored:
        return stored[:count]
    entries = recent_events(store, 4 * count, job_id, kinds=RUN_ENDS | {"claimed"})
    return runs_of(entries, count)


def stored_runs(store: AnyStore, job_id: str) -> list[Run]:
    """A recurring job's last runs as the scripts keep them (lua/include/history.lua:
    ``sched|attempt|fence|started|ended|outcome``, ms), newest first; an entry that does
    not parse is left out (the list is derived data)."""
    part = of_job(store, job_id)
    try:
        raw = part.redis.lrange(part.keys.runs(job_id), 0, -1)
    except redis_errors() as exc:  # a key of another type: no stored runs
        if "WRONGTYPE" not in str(exc):
            raise
        return []
    runs: list[Run] = []
    for item in raw:
        try:
            sched, attempt, at, end, outcome = records.run_entry(str(item))
            runs.append(
                Run(
                    scheduled=sched,
                    attempt=attempt,
                    started=at,
                    outcome=outcome,
                    duration=None if at is None else round(end - at, 6),
                )
            )
        except ValueError:
            continue
    return runs


def redis_errors() -> type[Exception]:
    import redis

    return redis.ResponseError


def runs_of(entries: list[Entry], count: int = 10) -> list[Run]:
    """The runs (claim, then outcome) among events ``entries`` (oldest first), newest
    first, at most ``count``."""
    started: dict[tuple[float | None, int | None], float] = {}
    runs: list[Run] = []
    for entry in entries:  # oldest first
        e = entry.event
        key = (e.scheduled, e.attempt)
        if e.kind == "claimed":
            started[key] = e.at
        elif key in started:
            at = started.pop(key)
            runs.append(
                Run(
                    scheduled=e.scheduled,
                    attempt=e.attempt,
                    started=at,
                    outcome=e.kind,
                    duration=round(e.at - at, 6),
                )
            )
    return runs[::-1][:count]


def recent_events(
    store: AnyStore,
    count: int = 20,
    job_id: str | None = None,
    until: str = "+",
    kinds: frozenset[str] | None = None,
    scan: int | None = None,
) -> list[Entry]:
    """The last ``count`` events (of ``job_id`` only, and of ``kinds`` only, if given) up
    to stream id ``until`` (inclusive), oldest first. Filtering reads the stream backwards
    in chunks, so it costs at most one pass over the capped stream (~10,000 entries), or
    over its newest ``scan`` entries (per shard) if given."""
    if count <= 0:
        return []
    if job_id is not None:
        store = of_job(store, job_id)
    shards = parts(store)
    if len(shards) > 1:  # merged by time; stream ids are per shard
        merged = [e for s in shards for e in recent_events(s, count, None, until, kinds, scan)]
        return sorted(merged, key=lambda e: e.event.at)[-count:]
    store = shards[0]
    found: list[Entry] = []
    top = until
    budget = scan
    while len(found) < count and (budget is None or budget > 0):
        chunk = count if job_id is None and kinds is None else SCAN_CHUNK
        if budget is not None:
            chunk = min(chunk, budget)
            budget -= chunk
        rows = store.redis.xrevrange(store.keys.events, max=top, min="-", count=chunk)
        for entry_id, fields in rows:
            for event in reversed(records.events(fields)):  # newest first, as the rows
                if _wanted(event, job_id, kinds):
                    found.append(Entry(str(entry_id), event))
                    if len(found) == count:
                        break
            if len(found) == count:
                break
        if len(rows) < chunk:
            break
        top = "(" + str(rows[-1][0])
    return found[::-1]


def _wanted(event: Event, job_id: str | None, kinds: frozenset[str] | None) -> bool:
    return (job_id is None or event.job_id == job_id) and (kinds is None or event.kind in kinds)


def follow(
    store: AnyStore,
    *,
    after: str | None = None,
    job_id: str | None = None,
    kinds: frozenset[str] | None = None,
    block: float = 5.0,
    limit: int | None = None,
    timeout: float | None = None,
) -> Iterator[Entry]:
    """Tail the event stream: yield each event added after stream id ``after`` (default:
    the newest entry at the time of this call, so an event added once ``follow`` has
    returned is never missed), oldest first, ``job_id``'s only if given.

    Waits with ``XREAD BLOCK`` (``block`` s per read, at most half the client's read timeout;
    no polling) until ``limit`` events were yielded or ``timeout`` seconds passed (``None``:
    forever, until the caller stops iterating, e.g. on Ctrl-C)."""
    start = last_event_id(store) if after is None else after
    return _tail(parts(store)[0], start, job_id, kinds, block, limit, timeout)


def _tail(
    store: Part,
    last: str,
    job_id: str | None,
    kinds: frozenset[str] | None,
    block: float,
    limit: int | None,
    timeout: float | None,
) -> Iterator[Entry]:
    deadline = None if timeout is None else time.monotonic() + timeout
    block = min(block, urls.read_timeout(store.redis) / 2)  # a read past it fails as a timeout
    block_ms = max(1, round(block * 1000))
    yielded = 0
    while limit is None or yielded < limit:
        wait_ms = block_ms
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            wait_ms = max(1, min(block_ms, round(left * 1000)))
        reply = store.redis.xread({store.keys.events: last}, block=wait_ms, count=100)
        for entry_id, fields in _stream_rows(reply):
            last = str(entry_id)
            for event in records.events(fields):
                if not _wanted(event, job_id, kinds):
                    continue
                yield Entry(last, event)
                yielded += 1
                if limit is not None and yielded >= limit:
                    return


def _stream_rows(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """The entries of an XREAD reply of one stream (RESP2 list or RESP3 dict)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return [row for rows in reply.values() for row in (rows[0] if rows else [])]
    return [row for _stream, rows in reply for row in rows]


# ---- plain JSON ---------------------------------------------------------------------------


iso = timeinput.iso_ms  # the readouts' instants (JSON): ISO 8601 in UTC, to the ms
