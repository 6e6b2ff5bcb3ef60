"""Jobs of one state, a page at a time: ``duetime ls --state`` and ``Client.list_jobs``.

Each state is read from where the store already keeps it, so no pending job pays for an
index (docs/performance.md): ``scheduled`` from the lanes' due sets in due order,
``running`` from the RUNNING hash (every job with an invocation running, whatever its own
state: a job cancelled or paused while it runs is listed, as ``stats`` counts it and
``show`` lists its invocation), ``paused`` from the ``paused`` set (pause.lua /
resume.lua), the finished states from ``done:<state>`` (written where a job retires,
include/retire.lua, trimmed to the day a finished job is kept; newest first), ``dead`` from
``dead-jobs`` (jobs with dead letters, include/dead.lua; newest first) and ``all`` from a
SCAN of the job keys (on a database shared with other data a page may come back short:
SCAN visits every key). ``live`` (what ``duetime ls`` lists by default) is running, then
paused, then scheduled jobs (a job with an invocation running is listed once, as
running). Indexes are derived data: every job a page names is read again and kept only
if it is still in that state, so a stale entry is skipped, never shown.

A cursor is opaque text (base64 of JSON: the shard, and where its index was left); None
means the listing is complete. A page holds at most ``limit`` jobs; a job with several
pending invocations is named once per page. ``task`` filters the jobs read: a page then
reads up to ``MAX_ROUNDS`` x ``limit`` index entries to fill itself, and may come back
short (or empty) with a cursor to go on.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

from scheduler.model import JobInfo
from scheduler.stores.redis.protocol import records
from scheduler.stores.redis.protocol.keys import Keys
from scheduler.stores.redis.protocol.requests import Calls, Op, Scan, one, run
from scheduler.stores.redis.reading import lane_queues, snapshots
from scheduler.stores.redis.reading.readable import AnyStore

FINISHED = ("succeeded", "failed", "abandoned", "cancelled")
STATES = ("scheduled", "running", "paused", *FINISHED, "dead", "all", "live")
LIVE = ("running", "paused", "scheduled")  # what ``live`` lists, in this order
MAX_ROUNDS = 20  # index reads per page when --task leaves a round short
MAX_LIMIT = 1000


@dataclass(frozen=True)
class Page:
    """One page of a listing: the jobs, and the cursor of the next page (None: done)."""

    jobs: list[JobInfo]
    cursor: str | None


def encode_cursor(shard: int, inner: Any) -> str:
    raw = json.dumps([shard, inner], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> tuple[int, Any]:
    """(shard, where its index was left); (0, None) for the first page."""
    if not cursor:
        return 0, None
    try:
        shard, inner = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if isinstance(shard, int) and shard >= 0:
            return shard, inner
    except (ValueError, TypeError):
        pass
    raise ValueError(f"not a cursor of duetime ls: {cursor!r}")


def list_jobs(
    store: AnyStore,
    state: str = "scheduled",
    *,
    task: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
    lane: str | None = None,
    prefix: str | None = None,
) -> Page:
    """One page of the jobs in ``state`` (one of ``STATES``), whose task is ``task``, lane
    ``lane`` and id starts with ``prefix`` if given (filters within pages, as ``task``),
    after ``cursor`` (a previous page's; None: from the start)."""
    parts = [p.keys for p in store.parts]
    return run(
        store,
        page(parts, state, task=task, limit=limit, cursor=cursor, lane=lane, prefix=prefix),
    )


def page(
    parts: list[Keys],
    state: str = "scheduled",
    *,
    task: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
    lane: str | None = None,
    prefix: str | None = None,
) -> Op[Page]:
    """``list_jobs`` as an operation (protocol/requests.py) over the namespace's ``parts``."""
    if state not in STATES:
        raise ValueError(f"state must be one of {', '.join(STATES)}, got {state!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be an int in 1..{MAX_LIMIT}, got {limit!r}")
    shard, inner = decode_cursor(cursor)
    out: list[JobInfo] = []
    seen: set[str] = set()
    for _ in range(MAX_ROUNDS):
        if shard >= len(parts) or len(out) >= limit:
            break
        try:
            infos, inner = yield from _round(parts[shard], state, inner, limit - len(out), seen)
        except (TypeError, IndexError, KeyError, OverflowError):  # a cursor of the wrong shape
            raise ValueError(f"not a cursor of duetime ls for --state {state}") from None
        for info in infos:
            seen.add(info.job_id)
            if (
                (task is None or info.task == task)
                and (lane is None or info.lane == lane)
                and (prefix is None or info.job_id.startswith(prefix))
            ):
                out.append(info)
        if inner is None:
            shard += 1
    done = shard >= len(parts)
    return Page(out[:limit], None if done else encode_cursor(shard, inner))


def _round(
    k: Keys, state: str, inner: Any, count: int, seen: set[str]
) -> Op[tuple[list[JobInfo], Any]]:
    """One read of a shard's index for ``state``: the jobs found still in that state (not
    in ``seen``), and where the next read starts (None: the shard is done). ``live``
    reads running, then paused, then scheduled jobs (each a state of its own)."""
    if state != "live":
        retries: dict[str, float] = {}  # job id -> when its earliest retry read is due
        ids, inner = yield from _ids(k, state, inner, count, retries)
        infos = yield from _infos(k, [i for i in ids if i not in seen], state, retries)
        return infos, inner
    phase, sub = (0, None) if inner is None else (int(inner[0]), inner[1])
    if not 0 <= phase < len(LIVE):
        raise TypeError("a cursor out of range")
    infos, sub = yield from _round(k, LIVE[phase], sub, count, seen)
    if phase:  # a job with an invocation running was listed in the running phase
        infos = [i for i in infos if not i.running]
    if sub is None:
        phase += 1
    return infos, (None if phase >= len(LIVE) else [phase, sub])


def _ids(
    k: Keys, state: str, inner: Any, count: int, retries: dict[str, float]
) -> Op[tuple[list[str], Any]]:
    """Up to about ``count`` job ids of ``state`` in one shard after ``inner``, and where
    the next read starts (None: the shard is done). ``retries`` is given the due time (ms)
    of each retry entry read (the job hash holds only how many are pending)."""
    i = k.shard
    if state == "scheduled":
        # the default lane even when the lanes index is gone (eviction, a restart)
        lanes = sorted(
            {"default", *(str(lane) for lane in (yield from one(i, "smembers", k.lanes)))}
        )
        waiting = sorted(str(t) for t in (yield from one(i, "smembers", k.parked)))
        # due members, and those waiting for a replica that serves their task (park.lua)
        by_lane = yield from lane_queues.queues(k, lanes)  # flow queues too
        dues = [k.due(q) for qs in by_lane.values() for q in qs]
        dues += [k.parked_jobs(t) for t in waiting]
        return (yield from _zpage(k, dues, inner, count, False, retries))
    if state in FINISHED:
        return (yield from _zpage(k, [k.done(state)], inner, count, True))
    if state == "dead":
        return (yield from _zpage(k, [k.dead_jobs], inner, count, True))
    start, skip = (0, 0) if inner is None else (int(inner[0]), int(inner[1]))
    if not (0 <= start < 2**64 and 0 <= skip < 2**31):  # a SCAN cursor, an offset in a batch
        raise TypeError("a cursor out of range")
    if state == "running":
        nxt, entries = yield from one(i, "hscan", k.running, start, count=count)
        ids = [r.job_id for r in records.running_entries(entries).values()]
    elif state == "paused":
        nxt, ids = yield from one(i, "sscan", k.paused, start, count=count)
    else:  # all
        nxt, keys = yield Scan(i, start, k.job("*"), max(count, 100), k.lanes)
        ids = [key[len(k.job("")) :] for key in keys]
    ids = [str(i) for i in ids][skip:]
    if len(ids) > count:  # SCAN's COUNT is a hint: the rest of this batch comes next
        return ids[:count], [start, skip + count]
    return ids, (None if int(nxt) == 0 else [int(nxt), 0])


def _zpage(
    k: Keys,
    keys: list[str],
    inner: Any,
    count: int,
    reverse: bool,
    retries: dict[str, float] | None = None,
) -> Op[tuple[list[str], Any]]:
    """The next ``count`` members of sorted sets ``keys`` merged by (score, member), after
    ``inner`` ([score, member]; descending if ``reverse``), as job ids; the score of each
    job's first retry member (``<seq>|r|...``) into ``retries`` if given."""
    after = None if inner is None else (float(inner[0]), str(inner[1]))
    if after is not None and not math.isfinite(after[0]):
        raise TypeError("a cursor's score must be finite")
    got: list[tuple[float, str]] = []
    for key in keys:
        got += yield from _after(k.shard, key, after, count, reverse)
    got.sort(reverse=reverse)
    page = got[:count]
    for score, member in page:
        if retries is not None and records.is_retry(member):
            retries.setdefault(records.member_job(member), score)
    if len(page) < count:  # every set was read to its end
        return [records.member_job(m) for _, m in page], None
    return [records.member_job(m) for _, m in page], list(page[-1])


def _after(
    part: int, key: str, after: tuple[float, str] | None, count: int, reverse: bool
) -> Op[list[tuple[float, str]]]:
    """Up to ``count`` (score, member) of ``key`` strictly after ``after`` in its order."""
    edge = "+inf" if reverse else "-inf"
    start = edge if after is None else _score(after[0])
    end = "-inf" if reverse else "+inf"
    out: list[tuple[float, str]] = []
    offset = 0
    while len(out) < count:
        batch = yield from one(
            part,
            "zrange",
            key,
            start,
            end,
            byscore=True,
            desc=reverse,
            offset=offset,
            num=count,
            withscores=True,
        )
        for member, score in batch:
            item = (float(score), str(member))
            if after is None or (item < after if reverse else item > after):
                out.append(item)
        if len(batch) < count:
            break
        offset += len(batch)
    return out[:count]


def _score(score: float) -> str:
    return str(int(score)) if score == int(score) else repr(score)


def _infos(
    k: Keys, ids: list[str], state: str, retries: dict[str, float] | None = None
) -> Op[list[JobInfo]]:
    """The jobs ``ids`` (each once, in order) that are still in ``state``; a scheduled
    one's next run is its earliest retry's due time (ms in ``retries``) if that is sooner
    (a one-off waiting for its retry has no next occurrence: it read "-")."""
    ids = list(dict.fromkeys(ids))
    if not ids:
        return []
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [("hgetall", (k.running,), {})]
    for job_id in ids:
        calls.append(("hgetall", (k.job(job_id),), {}))
        if state == "dead":
            calls.append(("lrange", (k.dead(job_id), 0, -1), {}))
    replies = yield Calls(k.shard, tuple(calls), lenient=True)  # a bad key fails no listing
    wanted = set(ids)  # the RUNNING entries of these jobs only, each parsed once
    every = {} if isinstance(replies[0], Exception) else replies[0]
    parsed = records.running_entries(every)
    running = {t: every[t] for t, r in parsed.items() if r.job_id in wanted}
    rest = replies[1:]
    step = 2 if state == "dead" else 1
    out = []
    for n, job_id in enumerate(ids):
        h = rest[n * step]
        dead = rest[n * step + 1] if state == "dead" else []
        if not isinstance(h, Exception) and (not h or h.get("def") is None):
            continue
        info = snapshots.from_replies(job_id, h, [], dead, running)
        assert info is not None
        retry = (retries or {}).get(job_id)
        if retry is not None and info.state == "scheduled":
            soonest = min(retry / 1000, math.inf if info.next_run is None else info.next_run)
            info = dataclasses.replace(info, next_run=soonest)
        # running: every job with an invocation in RUNNING, whatever the job's own state
        # (cancelled or paused while it runs): what ``stats`` counts and ``show`` lists
        keep = {"all": True, "dead": bool(info.dead_letters), "running": bool(info.running)}
        # a job whose hash does not parse is listed where its index put it, not hidden
        if keep.get(state, info.state in (state, "malformed")):
            out.append(info)
    return out
