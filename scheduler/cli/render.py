"""What the CLI prints: records as plain JSON values (each time as epoch seconds and as
ISO 8601 in UTC, ``*_iso``) and as text for people (local time, aligned columns)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from scheduler import timeinput, validation
from scheduler.flow import FlowState
from scheduler.limit_usage import Hold, KeyUsage, ScopeUsage
from scheduler.model import Event, InvocationInfo, JobInfo, Skip
from scheduler.stores.redis.reading.queries import Entry, iso


def args_value(args: str) -> Any:
    """A job's arguments (JSON text) as a JSON value; text that is not JSON as is."""
    try:
        return validation.loads(args) if args else None
    except ValueError:
        return args


def event_json(event: Event, entry_id: str | None = None) -> dict[str, Any]:
    """An event as a plain JSON object (with its stream id when known)."""
    out: dict[str, Any] = {} if entry_id is None else {"id": entry_id}
    out.update(
        at=event.at,
        at_iso=iso(event.at),
        kind=event.kind,
        job_id=event.job_id,
        scheduled=event.scheduled,
        scheduled_iso=iso(event.scheduled),
        attempt=event.attempt,
        detail=event.detail,
    )
    return out


def invocation_json(inv: InvocationInfo) -> dict[str, Any]:
    """A running invocation as a plain JSON object."""
    return {
        "job_id": inv.job_id,
        "scheduled": inv.scheduled,
        "scheduled_iso": iso(inv.scheduled),
        "attempt": inv.attempt,
        "fence": inv.fence,
        "lease_until": inv.lease_until,
        "lease_until_iso": iso(inv.lease_until),
    }


def skip_json(skip: Skip) -> dict[str, Any]:
    """A range of skipped occurrences as a plain JSON object."""
    return {
        "first": skip.first,
        "first_iso": iso(skip.first),
        "last": skip.last,
        "last_iso": iso(skip.last),
        "count": skip.count,
        "reason": skip.reason,
    }


def job_json(info: JobInfo) -> dict[str, Any]:
    """Every ``JobInfo`` field as a plain JSON object (``last_result`` is already JSON)."""
    return {
        "job_id": info.job_id,
        "task": info.task,
        "args": args_value(info.args),
        "schedule": info.schedule,
        "lane": info.lane,
        "priority": info.priority,
        "limit_key": info.limit_key,
        "result_ttl": info.result_ttl,
        "state": info.state,
        "next_run": info.next_run,
        "next_run_iso": iso(info.next_run),
        "runs": info.runs,
        "failures": info.failures,
        "attempts": info.attempts,
        "last_result": info.last_result,
        "last_error": info.last_error,
        "last_traceback": info.last_traceback,
        "trace_id": info.trace_id or None,
        "running": [invocation_json(i) for i in info.running],
        "skipped": [skip_json(s) for s in info.skipped],
        "dead_letters": [event_json(e) for e in info.dead_letters],
        "progress": progress_json(info),
    }


def progress_json(info: JobInfo) -> dict[str, Any] | None:
    """What a run last reported (``current_invocation().progress``), or None."""
    p = info.progress
    if p is None:
        return None
    return {"scheduled_ms": p.scheduled_ms, "at": p.at, "at_iso": iso(p.at), "value": p.value}


def progress_text(info: JobInfo) -> str:
    """``show``'s progress line: the value, of which run, reported when."""
    p = info.progress
    if p is None:
        return "-"
    value = clip(json.dumps(p.value), 200)
    return f"{value}  (invocation {info.job_id}@{p.scheduled_ms}, reported {iso(p.at)})"


def key_usage_json(k: KeyUsage) -> dict[str, Any]:
    """One key under a limit as a plain JSON object (seconds as floats)."""
    return k._asdict()


def scope_usage_json(u: ScopeUsage) -> dict[str, Any]:
    """What waits on one declared limit (``Client.limit_usage``) as a plain JSON object."""
    out = u._asdict()
    out.update(
        limit=u.limit._asdict(),
        limit_text=u.limit.describe(),
        top=[key_usage_json(k) for k in u.top],
    )
    return out


def hold_json(h: Hold | None) -> dict[str, Any] | None:
    """What holds a job back (``Client.hold_of``) as a plain JSON object, with its text."""
    if h is None:
        return None
    return {**h._asdict(), "limit": h.limit._asdict(), "text": h.describe()}


def flow_state_json(s: FlowState) -> dict[str, Any]:
    """Where a limit key stands (``Client.flow_of``) as a plain JSON object."""
    return {**s._asdict(), "limit": None if s.limit is None else s.limit._asdict()}


# ---- text for people (what the CLI prints) ------------------------------------------------


def kept_for(result_ttl: float | None) -> str:
    """How long a job's results are kept, given its ``result_ttl`` (docs/results.md)."""
    if result_ttl is None:
        return "1d after a run (a recurring job's: when waited for)"
    return span(result_ttl) + " after each run"


def state_text(info: JobInfo, waiting: str | None = None) -> str:
    """A job's state as ``ls``, ``show`` and the console print it: ``waiting`` for a
    scheduled job no live replica serves; a job with invocations still running while its
    own state is another (cancelled or paused while it runs) says so: ``cancelled, 1
    running``, as ``ls --state running`` lists it and ``stats`` counts it."""
    if waiting:
        return "waiting"
    if info.running and info.state != "running":
        return f"{info.state}, {len(info.running)} running"
    return info.state


def table(
    headers: list[str], rows: list[list[str]], right: frozenset[int] = frozenset()
) -> list[str]:
    """Rows as aligned columns (right-aligned where asked), trailing blanks trimmed."""
    widths = [max(len(row[c]) for row in [headers, *rows]) for c in range(len(headers))]
    return [
        "  ".join(
            cell.rjust(w) if c in right else cell.ljust(w)
            for c, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in [headers, *rows]
    ]


def local(t: float | None) -> str:
    """Epoch seconds as local ISO 8601 time with milliseconds (``-`` for none)."""
    if t is None:
        return "-"
    try:
        return dt.datetime.fromtimestamp(t).astimezone().isoformat(timespec="milliseconds")
    except timeinput.OUT_OF_RANGE:
        return timeinput.beyond(t)


def span(seconds: float) -> str:
    """A duration: ``12.3s``, ``4m05s``, ``2h07m``, ``3d04h``."""
    s = seconds
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def when(t: float | None, now: float) -> str:
    """``2030-01-01T10:00:00.000+01:00 (in 12.3s)`` (or ``(1.2s ago)``) relative to ``now``."""
    if t is None:
        return "-"
    d = t - now
    return f"{local(t)} ({'in ' + span(d) if d >= 0 else span(-d) + ' ago'})"


def clip(text: str | None, width: int) -> str:
    """The first line of ``text``, cut to ``width`` characters."""
    lines = (text or "").strip().splitlines()
    line = lines[0] if lines else ""
    return line if len(line) <= width else line[: width - 3] + "..."


def event_line(entry: Entry) -> str:
    """One event as a line: local time, kind, job, scheduled time, attempt, detail."""
    e = entry.event
    parts = [local(e.at), f"{e.kind:<13}", e.job_id or "-"]
    if e.scheduled is not None:
        parts.append(f"scheduled {local(e.scheduled)}")
    if e.attempt is not None:
        parts.append(f"attempt {e.attempt}")
    if e.detail:
        parts.append(e.detail)
    return "  ".join(parts)


def waited(seconds: float | None) -> str:
    """A wait for people: ``1.75 s``, ``3 min``; ``-`` for none."""
    return "-" if seconds is None else timeinput.span(seconds)


def full_text(full: str | None, next_start_in: float | None) -> str:
    """Whether a key's limit is full: ``-``, ``concurrency``, ``rate (next start in 0.4 s)``."""
    if full is None:
        return "-"
    if next_start_in is None:
        return full
    return f"{full} (next start in {timeinput.span(next_start_in)})"
