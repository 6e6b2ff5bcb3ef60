"""What each page of the console shows, as plain JSON values: the JSON endpoints return
these dicts as they are and the HTML pages render them. Read only through the store's
queries (``stores/redis/reading/``: ``queries.py``, ``listing.py``,
``console_history.py``, ``limits.py``): no key name or stream entry is read here.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from scheduler import limit_usage
from scheduler.cli import render
from scheduler.model import JobInfo
from scheduler.stores.redis.reading import console_history, fleet, listing, queries
from scheduler.web import occurrences, redaction
from scheduler.web.redaction import REDACTED

if TYPE_CHECKING:
    from scheduler.stores.redis import RedisStore, ShardedStore

    AnyStore = RedisStore | ShardedStore  # a namespace's store, the console's way in

CHART_MINUTES = 60  # the overview's charts: the last hour, a point per minute
ARGS_CLIP = 80  # characters of arguments shown in a list row
ARGS_TITLE_CLIP = 1000  # ... and in its tooltip (a page of 64 KB arguments was 10 MB)
EVENT_SCAN = 2000  # stream entries a job's page reads for its events (?scan=all: every one)
RECURRING_SCAN = 2000  # live jobs read at most per page of the recurring page


def job_row(info: JobInfo, redact: bool, serving: fleet.Serving | None = None) -> dict[str, Any]:
    """A job as a list row (and a detail page's head): ``render.job_json`` with the
    arguments as JSON text, clipped for lists (``args_short``), or redacted; ``waiting``:
    why a scheduled job is not claimed (no live replica of ``serving`` serves its task)."""
    out = render.job_json(info)
    scheduled = serving is not None and info.state == "scheduled"
    out["waiting"] = serving.why_waiting(info.task) if serving and scheduled else None
    out["state_text"] = render.state_text(info, out["waiting"])
    text = REDACTED if redact else info.args
    out["args"] = REDACTED if redact else out["args"]
    out["args_text"] = text
    out["args_short"] = render.clip(text, ARGS_CLIP)
    out["args_title"] = render.clip(text, ARGS_TITLE_CLIP)
    return redaction.job(out) if redact else out


class Charts:
    """Per-minute figures, cached: a finished minute never changes, so each poll reads
    only the current and the previous minute (two HGETALL) after the first."""

    def __init__(self) -> None:
        self._done: dict[tuple[str, int], console_history.Minute] = {}
        self._eras: dict[str, str] = {}  # the namespace's epoch the cached minutes are of

    def series(self, ns: str, store: AnyStore, now: float) -> list[console_history.Minute]:
        era = console_history.era(store)
        if self._eras.get(ns, era) != era:  # Redis lost the data the cache was read from
            for key in [k for k in self._done if k[0] == ns]:
                del self._done[key]
        self._eras[ns] = era
        last = int(now // 60)
        first = last - CHART_MINUTES + 1
        missing = [m for m in range(first, last - 1) if (ns, m) not in self._done]
        if missing:
            for row in console_history.minutes(store, missing[0], last - 2):
                self._done[(ns, row["minute"])] = row
        recent = console_history.minutes(store, last - 1, last)
        for key in [k for k in self._done if k[0] == ns and k[1] < first]:
            del self._done[key]
        return [self._done[(ns, m)] for m in range(first, last - 1)] + recent


def overview(ns: str, store: AnyStore, charts: Charts) -> dict[str, Any]:
    """Queue depth and due now per lane, running, replicas with their heartbeat and
    version, the event counters, and the last hour per minute (throughput, failures,
    lag p50/p99)."""
    now = queries.redis_now(store)
    shards = queries.parts(store)
    depths: dict[str, int] = {}
    due: dict[str, int] = {}
    for part in shards:
        for lane, n in queries.queue_depths(part).items():
            depths[lane] = depths.get(lane, 0) + n
        for lane, n in queries.due_now(part, now).items():
            due[lane] = due.get(lane, 0) + n
    counters: dict[str, int] = {}
    for part in shards:
        for kind, n in queries.counters(part).items():
            counters[kind] = counters.get(kind, 0) + n
    announced = console_history.replicas(store)
    for r in announced:
        r["heartbeat_iso"] = queries.iso(r["heartbeat"]) or ""  # type: ignore[typeddict-unknown-key]
        r["age"] = round(max(0.0, now - r["heartbeat"]), 1)  # type: ignore[typeddict-unknown-key]
    return {
        "namespace": ns,
        "now": now,
        "now_iso": queries.iso(now),
        "shards": len(shards),
        "lanes": [
            {"lane": lane, "queued": n, "due_now": due.get(lane, 0)}
            for lane, n in sorted(depths.items())
        ],
        "queued": sum(depths.values()),
        "due_now": sum(due.values()),
        "running": queries.running_count(store),
        "replicas": announced,
        "replicas_alive": sum(1 for r in announced if r["alive"]),
        "waiting": fleet.waiting_all(store),  # task -> jobs no live replica serves
        "serves": fleet.serving(store).by_replica,
        "counters": dict(sorted(counters.items())),
        "minutes": charts.series(ns, store, now),
    }


def jobs(
    store: AnyStore,
    redact: bool,
    *,
    state: str = "live",
    task: str | None = None,
    lane: str | None = None,
    prefix: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> dict[str, Any]:
    """One page of jobs (``listing.list_jobs``: server-side paging, filters within pages)."""
    page = listing.list_jobs(
        store, state, task=task, limit=limit, cursor=cursor, lane=lane, prefix=prefix
    )
    now = queries.redis_now(store)
    serving = fleet.serving(store)
    rows = page.jobs
    if state in ("scheduled", "live"):
        rows = sorted(rows, key=lambda i: (i.next_run is None, i.next_run or 0.0, i.job_id))
    return {
        "now": now,
        "filters": {"state": state, "task": task, "lane": lane, "prefix": prefix},
        "jobs": [job_row(i, redact, serving) for i in rows],
        "cursor": page.cursor,
    }


def job(
    store: AnyStore, job_id: str, redact: bool, scan: int | None = EVENT_SCAN
) -> dict[str, Any] | None:
    """Everything about one job; None if there is no such job. Its events and recent runs
    are looked for among the newest ``scan`` entries of the capped event stream (None:
    the whole stream, ~10,000 entries: a few times slower)."""
    info = store.get(job_id)
    if info is None:
        return None
    now = queries.redis_now(store)
    spec = queries.definition(store, job_id)
    recent = queries.recent_events(store, 60, job_id, scan=scan)
    return {
        "now": now,
        "job": job_row(info, redact, fleet.serving(store)),
        "held": render.hold_json(limit_usage.held(store, info)),
        "definition": _definition(spec),
        "upcoming": occurrences.as_json(occurrences.upcoming(spec, info.next_run, now)),
        "runs": queries.stored_runs(store, job_id) or queries.runs_of(recent, 20),
        "events": _events(recent, redact),
        "scanned": scan,
    }


def limits(store: AnyStore) -> dict[str, Any]:
    """Each declared limit and what waits on it (``Client.limit_usage``): per scope the
    keys it governs with due or running work, running, starts in the window, due jobs
    waiting and held, the oldest wait, and its top keys; a sharded namespace has none."""
    return {
        "now": queries.redis_now(store),
        "sharded": len(queries.parts(store)) > 1,
        "scopes": [render.scope_usage_json(u) for u in store.limit_usage()],
    }


def _definition(spec: Any) -> dict[str, Any]:
    if spec is None:
        return {}
    retry = spec.retry
    return {
        "schedule": spec.schedule.describe(),
        "lane": spec.lane,
        "timeout": spec.timeout,
        "retry": f"{retry.max_attempts} attempt(s), backoff {retry.backoff:g}s x{retry.factor:g}",
        "misfire": spec.misfire.value,
        "misfire_grace": spec.misfire_grace,
        "catch_up_window": spec.catch_up_window,
        "overlap": spec.overlap.value,
        "delivery": spec.delivery.value,
        "results_kept": render.kept_for(spec.result_ttl),
        "trace_id": None if spec.trace is None else spec.trace.trace_id,
    }


def running(store: AnyStore) -> dict[str, Any]:
    """Every running invocation: replica, attempt, fence, age, lease time left."""
    now = queries.redis_now(store)
    rows = [
        {
            "job_id": r.job_id,
            "replica": r.owner,
            "scheduled": r.scheduled,
            "scheduled_iso": queries.iso(r.scheduled),
            "attempt": r.attempt,
            "fence": r.fence,
            "age": round(max(0.0, now - r.scheduled), 3),
            "lease_until": r.lease_until,
            "lease_left": None if r.lease_until is None else round(r.lease_until - now, 3),
        }
        for r in queries.running(store)
    ]
    return {"now": now, "running": sorted(rows, key=lambda r: -r["age"])}


def failed(store: AnyStore, redact: bool, cursor: str | None = None) -> dict[str, Any]:
    """Jobs with dead letters (tracebacks included), newest first, a page at a time;
    and the failed one-offs among them."""
    page = listing.list_jobs(store, "dead", limit=50, cursor=cursor)
    return {
        "now": queries.redis_now(store),
        "jobs": [job_row(i, redact) for i in page.jobs],
        "cursor": page.cursor,
    }


def recurring(store: AnyStore, redact: bool, cursor: str | None = None) -> dict[str, Any]:
    """Live recurring (fixed-rate and cron) jobs, a page at a time: up to
    ``RECURRING_SCAN`` live jobs are read per page (one-offs skipped), so a namespace of
    many pending one-offs may need several pages to show them all."""
    rows: list[JobInfo] = []
    for _ in range(RECURRING_SCAN // 500):
        page = listing.list_jobs(store, "live", limit=500, cursor=cursor)
        rows += [i for i in page.jobs if i.schedule.startswith(("every", "cron"))]
        cursor = page.cursor
        if cursor is None or len(rows) >= 50:
            break
    return {
        "now": queries.redis_now(store),
        "jobs": [job_row(i, redact) for i in rows],
        "cursor": cursor,
    }


def events(
    store: AnyStore, kinds: frozenset[str] | None, redact: bool, count: int = 100
) -> dict[str, Any]:
    """The newest ``count`` events (of ``kinds`` only, if given), newest first."""
    recent = queries.recent_events(store, count, kinds=kinds)
    return {"now": time.time(), "kinds": sorted(kinds or ()), "events": _events(recent, redact)}


def _events(recent: list[Any], redact: bool) -> list[dict[str, Any]]:
    keep: Any = redaction.event if redact else (lambda e: e)
    rows, seen = [], Counter[str]()
    for e in reversed(recent):  # the changes of one batch entry share its stream id
        n, seen[e.id] = seen[e.id], seen[e.id] + 1
        rows.append(render.event_json(keep(e.event), e.id if not n else f"{e.id}.{n}"))
    return rows
