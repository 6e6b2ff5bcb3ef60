"""A job's hash as a ``JobInfo`` for readouts (``duetime ls``/``show``, ``Client.get``,
the web console): what the hash holds, tolerant of garbage, which is shown, never a
failed listing (a job that does not parse reads as ``malformed``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from scheduler import validation
from scheduler.flow import lane_of
from scheduler.model import InvocationInfo, JobInfo, JobSpec, Progress, TaskRef
from scheduler.stores.redis.protocol.definitions import decode
from scheduler.stores.redis.protocol.records import (
    dead_letter,
    is_int,
    job_hash,
    queued_due,
    rerun_dues,
    running_entries,
    skip_entry,
)

T = TypeVar("T")


def job_info(
    job_id: str,
    h: dict[str, str],
    skips: list[str],
    dead: list[str],
    running: dict[str, str],
    leases: Mapping[str, float] | None = None,
) -> JobInfo:
    """A job hash (with its skip and dead-letter lists, the running hash and, if read,
    the leases of its invocations by token) as a JobInfo. A definition that cannot be
    read still gives a snapshot (it was quarantined); fields that do not parse (garbage)
    give one that says so instead of failing the listing."""
    try:
        return _job_info(job_id, job_hash(h, strict=True), skips, dead, running, leases)
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        lane = h.get("lane")
        return malformed(job_id, f"{type(exc).__name__}: {str(exc)[:120]}", lane and lane_of(lane))


def from_replies(
    job_id: str,
    h: Any,
    skips: Any,
    dead: Any,
    running: Any,
    leases: Mapping[str, float] | None = None,
) -> JobInfo | None:
    """``job_info`` of a lenient read's replies (requests.Calls): a reply that is an error
    (a key of the wrong type) reads as empty, and a job key that is not a hash as a
    ``malformed`` job; None if there is no such job."""
    if isinstance(h, Exception):
        return malformed(job_id, f"its key is not a hash ({str(h)[:80]})")
    if not h:
        return None
    skips, dead = ([] if isinstance(x, Exception) else x for x in (skips, dead))
    every = {} if isinstance(running, Exception) else running
    return job_info(job_id, h, skips, dead, every, leases)


def malformed(job_id: str, why: str, lane: object = None) -> JobInfo:
    """The snapshot of a job that cannot be read (its hash, or its key of the wrong type):
    listed as ``malformed``, saying why and what to run."""
    return JobInfo(
        job_id=job_id,
        schedule=f"(unreadable: {why}; run duetime doctor)",
        lane=str(lane or "default"),
        state="malformed",
        next_run=None,
        runs=0,
        failures=0,
        attempts=0,
        last_result=None,
        last_error=None,
        last_traceback=None,
        running=(),
        skipped=(),
        dead_letters=(),
        task="",
        args="",
    )


def _count(h: Mapping[str, str], name: str) -> int:
    """A job's counter as the scripts read it (``tonumber(v) or 0``: a garbled one counts
    from 0 again, so readouts show that too, and `duetime doctor` has nothing to repair)."""
    v = h.get(name)
    return int(v) if is_int(v) else 0


def _job_info(
    job_id: str,
    h: dict[str, str],
    skips: list[str],
    dead: list[str],
    running: dict[str, str],
    leases: Mapping[str, float] | None,
) -> JobInfo:
    try:
        spec: JobSpec | None = decode(h["def"], job_id)
    except (ValueError, KeyError, TypeError):
        spec = None  # quarantined: still inspectable
    invs = []
    for token, r in running_entries(running).items():
        if r.job_id == job_id:
            lease = (leases or {}).get(token)
            invs.append(InvocationInfo(job_id, r.scheduled, r.attempt, r.fence, lease))
    if h.get("cancelled") == "1":
        state = "cancelled"
    elif h.get("state"):
        state = h["state"]
    elif h.get("paused") == "1":
        state = "paused"
    elif invs:
        state = "running"
    else:
        state = "scheduled"
    skipped = _parsed(skip_entry, reversed(skips))  # history: a garbled entry is left out
    dead_letters = _parsed(lambda d: dead_letter(job_id, d), reversed(dead))
    result = h.get("last_result")
    return JobInfo(
        job_id=job_id,
        schedule=spec.schedule.describe() if spec else "(unreadable)",
        lane=lane_of(h.get("lane", "default")),  # the hash holds its queue
        state=state,
        next_run=_next_run(h, spec, state),
        runs=_count(h, "runs"),
        failures=_count(h, "failures"),
        attempts=_count(h, "attempts"),
        last_result=validation.loads(result) if result else None,
        last_error=h.get("last_error") or None,
        last_traceback=(h.get("last_tb") or None) if h.get("last_error") else None,
        running=tuple(invs),
        skipped=tuple(skipped),
        dead_letters=tuple(dead_letters),
        task=spec.target.name if spec and isinstance(spec.target, TaskRef) else "",
        args=spec.target.args_json if spec and isinstance(spec.target, TaskRef) else "",
        trace_id="" if spec is None or spec.trace is None else spec.trace.trace_id,
        priority=spec.priority if spec else 0,
        limit_key=spec.limit_key if spec else None,
        progress=progress_of(h.get("progress")),
        result_ttl=spec.result_ttl if spec else None,
    )


def progress_of(text: str | None) -> Progress | None:
    """progress.lua's field ``"<sched ms>|<at ms>|<JSON>"``; None if absent or garbled."""
    sched, _, rest = (text or "").partition("|")
    at, _, value = rest.partition("|")
    if not (sched.isdigit() and at.isdigit() and value):
        return None
    try:
        return Progress(int(sched), int(at) / 1000, json.loads(value))
    except ValueError:
        return None


def _parsed(parse: Callable[[str], T], entries: Iterable[str]) -> list[T]:
    """The entries of a job's history list that parse (one that does not is garbage in a
    record of the past: it leaves the job readable, as the scripts leave it runnable)."""
    out = []
    for entry in entries:
        try:
            out.append(parse(entry))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def _next_run(h: Mapping[str, str], spec: JobSpec | None, state: str) -> float | None:
    """The earliest instant a new start of the job may happen (docs/guarantees.md): its
    pending occurrence (``e``/``next``), one held while a run of it runs (``queued``) or a
    waiting re-run (``reruns``, lua/include/reruns.lua); None for a paused, cancelled or
    finished job (what it holds waits in its stash, or never starts)."""
    if state not in ("scheduled", "running"):
        return None
    dues = [int(h["next"])] if h.get("e") else []
    if h.get("queued"):
        dues.append(queued_due(h["queued"]))
    if "reruns" in h:
        dues += rerun_dues(h["reruns"])
    elif _retry_waits(h, spec):  # written before `reruns`: a one-off's retry is its `next`
        dues.append(int(h["next"]))
    return min(dues) / 1000 if dues else None


def _retry_waits(h: Mapping[str, str], spec: JobSpec | None) -> bool:
    """A one-off whose only pending run is a retry (its ``next`` is that retry's due time,
    lua/include/due.lua push_retry)."""
    retries = h.get("retries", "0")
    return (
        spec is not None
        and not spec.recurring
        and retries.isdigit()
        and int(retries) > 0
        and (h.get("next") or "").isdigit()
    )
