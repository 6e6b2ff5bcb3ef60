"""A job's next occurrences for its detail page, each with the daylight-saving decision
that produced it (cron jobs): pure functions of the definition and an instant.

The instants come from ``scheduler.cron`` / ``scheduler.schedules`` (the arithmetic the
replicas use), so the page shows exactly what will run; the decision is found by reading
each occurrence's wall time in the job's zone: a wall time that occurs twice (clocks go
back) names the ``ambiguous`` policy and which of the two instants this is, and a wall
time of the expression that does not exist (clocks go forward) is listed with what the
``missing`` policy does with it (shifted to the change, or skipped).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from scheduler import cron, timeinput
from scheduler.model import Cron, Every, JobSpec, Missing
from scheduler.schedules import first_index_at_or_after, occurrence

COUNT = 10


class Occurrence(TypedDict):
    at: float  # epoch seconds
    local: str  # the wall time in the job's zone (ISO 8601 with offset)
    decision: str  # "" for an ordinary time; else what the DST policy decided


def upcoming(spec: JobSpec | None, next_run: float | None, now: float) -> list[Occurrence]:
    """The next ``COUNT`` occurrences of the job from ``now`` (a one-off: its one run)."""
    if spec is None:
        return []
    s = spec.schedule
    if isinstance(s, Cron):
        return _cron(s, spec.job_id, now)
    if isinstance(s, Every):
        anchor = s.anchor if s.anchor is not None else (next_run or now)
        k = first_index_at_or_after(anchor, s.interval, min(now, next_run or now))
        times = [occurrence(anchor, s.interval, k + i) for i in range(COUNT)]
        return [_plain(t, "UTC") for t in times]
    return [] if next_run is None else [_plain(next_run, "UTC")]


def _plain(t: float, tz: str) -> Occurrence:
    try:
        local = dt.datetime.fromtimestamp(t, ZoneInfo(tz)).isoformat(timespec="seconds")
    except timeinput.OUT_OF_RANGE:  # a long interval's later occurrences, past 9999
        local = timeinput.beyond(t)
    return {"at": t, "local": local, "decision": ""}


def _cron(c: Cron, job_id: str, now: float) -> list[Occurrence]:
    zone = ZoneInfo(c.tz)
    out: list[Occurrence] = []
    t = now
    for _ in range(COUNT):
        nxt = cron.next_after(c, t, job_id)
        if nxt is None:
            break
        out.append(_annotated(c, zone, nxt))
        t = nxt
    if out:
        out = sorted(out + _gaps(c, zone, now, out[-1]["at"]), key=lambda o: o["at"])
    return out[: COUNT + 2]


def _annotated(c: Cron, zone: ZoneInfo, t: float) -> Occurrence:
    local = dt.datetime.fromtimestamp(t, zone)
    wall = local.replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0).utcoffset()
    second = wall.replace(tzinfo=zone, fold=1).utcoffset()
    decision = ""
    if first != second:
        which = "the earlier" if local.fold == 0 else "the later"
        decision = (
            f"{wall:%H:%M} occurs twice (clocks go back): ambiguous={c.ambiguous.value}, "
            f"this is {which} one"
        )
    elif _shifted(zone, local):
        decision = f"missing={Missing.SHIFT.value}: the wall time did not exist, run at the change"
    return {"at": t, "local": local.isoformat(timespec="seconds"), "decision": decision}


def _shifted(zone: ZoneInfo, local: dt.datetime) -> bool:
    """True if ``local`` is the first instant after a gap (clocks went forward at it)."""
    before = dt.datetime.fromtimestamp(local.timestamp() - 1, zone)
    return (before.utcoffset() or dt.timedelta()) < (local.utcoffset() or dt.timedelta())


def _gaps(c: Cron, zone: ZoneInfo, start: float, end: float) -> list[Occurrence]:
    """Wall times of the expression in (start, end] that do not exist in ``zone`` and that
    the ``skip`` policy drops (a shifted one is already an occurrence)."""
    if c.missing is not Missing.SKIP:
        return []
    out: list[Occurrence] = []
    utc = Cron(c.expr, "UTC")
    probe = start
    for _ in range(200):  # the expression's wall times, read as if the zone had no DST
        t = cron.next_after(utc, probe + _offset(zone, probe), "")
        if t is None:
            break
        wall = dt.datetime.fromtimestamp(t, dt.timezone.utc).replace(tzinfo=None)
        at = wall.replace(tzinfo=zone).timestamp()
        if at > end:
            break
        back = dt.datetime.fromtimestamp(at, zone).replace(tzinfo=None)
        if back != wall:  # the wall time does not exist here
            out.append(
                {
                    "at": at,
                    "local": f"{wall:%Y-%m-%dT%H:%M:%S} (does not exist in {c.tz})",
                    "decision": "missing=skip: clocks go forward, this occurrence is skipped",
                }
            )
        probe = max(at, probe + 1)
    return out


def _offset(zone: ZoneInfo, t: float) -> float:
    off = dt.datetime.fromtimestamp(t, zone).utcoffset()
    return off.total_seconds() if off else 0.0


def as_json(items: list[Occurrence]) -> list[dict[str, Any]]:
    from scheduler.stores.redis.reading.queries import iso

    return [{**o, "at_iso": iso(o["at"])} for o in items]
