"""The replica's half of calendar (cron) series in Redis.

Lua cannot evaluate a cron expression in a time zone, so replicas compute occurrences
in Python and write them with plan.lua (compare-and-set; see claim.lua's header for the
protocol). Everything here is idempotent: replicas racing on one series write it once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from scheduler import cron as crons
from scheduler import schedules
from scheduler.model import Claim, Cron, JobSpec
from scheduler.stores.redis.protocol import intervals, records, script_args
from scheduler.stores.redis.protocol.keys import Keys

log = logging.getLogger("duetime.redis")

FIELDS = ("def", "gen", "e", "next", "after", "replan")
SAY_EVERY = 60.0  # seconds between two reports that one job's series cannot be planned
_said: dict[str, float] = {}  # job -> monotonic time of its last report (this process)


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def first_two(spec: JobSpec, now_ms: int) -> tuple[int, int]:
    """The first occurrence of a new calendar job after ``now_ms`` (Redis time) and the
    one after it, in epoch ms. Raises ValueError if the schedule never fires."""
    assert isinstance(spec.schedule, Cron)
    first = crons.next_after(spec.schedule, now_ms / 1000, spec.job_id)
    second = None if first is None else crons.next_after(spec.schedule, first, spec.job_id)
    if first is None or second is None:
        raise ValueError(
            f"the cron schedule of {spec.job_id!r} has no occurrences after now; nothing was stored"
        )
    return _ms(first), _ms(second)


def plan_args(spec: JobSpec, h: dict[str, str], now_ms: int) -> list[str] | None:
    """plan.lua's arguments (after the prefix and now) for one calendar job whose hash
    fields are ``h``; None if there is nothing to write (moved on, or not a cron job)."""
    sched = spec.schedule
    if not isinstance(sched, Cron) or not h.get("e") or not h.get("next"):
        return None
    head = (spec.job_id, h["gen"], h["e"], h["next"])
    t = int(h["next"]) / 1000
    replan = h.get("replan") == "1"
    if not replan and h.get("after"):
        return None  # planned already
    # decide (the calendar arithmetic, one call), then pack plan.lua's arguments
    if replan:  # missed: the misfire policy decides what runs and what is kept pending
        grace, window = spec.misfire_grace, spec.catch_up_window
        p = crons.plan_calendar(sched, spec.job_id, t, now_ms / 1000, spec.misfire, grace, window)
        keep, after = (p.run, p.pending) if p.run is not None else (p.pending, p.later)
    else:  # on time: the occurrence after its next is all there is to write
        keep, after = t, crons.next_after(sched, t, spec.job_id)
    if keep is None or after is None:
        return None
    if not replan:
        return script_args.plan_after(*head, _ms(after))
    skip = None
    if p.skipped is not None:
        first, last, count = p.skipped
        skip = (_ms(first), _ms(last), count, p.reason)
    return script_args.plan_replan(*head, _ms(keep), p.run is not None, _ms(after), skip)


class PlanStore(Protocol):
    """What planning needs of a ``RedisStore`` (its public surface, nothing more)."""

    keys: Keys

    @property
    def redis(self) -> Any: ...

    def spec_of(self, job_id: str, text: str) -> JobSpec: ...

    def call_script(self, name: str, *args: Any) -> Any: ...

    def record_event(self, kind: str, detail: str, job: str = "") -> None: ...


def write_plans(store: PlanStore, jobs: Iterable[str], now_ms: int) -> list[str]:
    """Compute and write the plans claim.lua asked for; the replans among them (a series
    that missed several, which took a place of the claim). The caller claims again, so
    that the on-time occurrence starts in the claim that planned it, in that place
    (``in_place``; or the place goes to the next due job, as in process). Never raises: a
    job that cannot be planned (or a store error) is logged and left waiting; claim.lua
    asks again."""
    jobs = list(dict.fromkeys(jobs))
    try:
        with store.redis.pipeline(transaction=False) as p:
            for job in jobs:
                p.hmget(store.keys.job(job), *records.job_fields(FIELDS))
            rows = p.execute()
    except Exception:  # noqa: BLE001 - the caller's claims must still be returned
        log.warning("calendar plans not written; they are asked for again", exc_info=True)
        return []
    replanned: list[str] = []
    for job, row in zip(jobs, rows, strict=True):
        values = records.job_row(FIELDS, row)  # the small ones read from st
        h = {k: v for k, v in zip(FIELDS, values, strict=True) if v is not None}
        try:
            args = plan_args(store.spec_of(job, h["def"]), h, now_ms) if "def" in h else None
            if args is None or store.call_script("plan", *args) != 1:
                continue
            if args[4] == "replan":  # plan.lua's ARGV[7]
                replanned.append(job)
        except Exception as exc:  # noqa: BLE001 - one bad series must not stop the dispatcher
            _cannot_plan(store, job, exc)
    return replanned


def _cannot_plan(store: PlanStore, job: str, exc: Exception) -> None:
    """Say, at most once a minute per job, that its series cannot be planned here: one log
    line (a traceback only for what is not a bad zone or expression) and a
    ``plan_failed`` event on the job, which ``duetime show`` lists (its state still reads
    scheduled, its next run in the past). claim.lua asks again at the next claim."""
    now = time.monotonic()
    if now - _said.get(job, -SAY_EVERY) < SAY_EVERY:
        return
    if len(_said) > 10_000:
        _said.clear()
    _said[job] = now
    known = isinstance(exc, (ValueError, LookupError))  # ZoneInfoNotFoundError is a KeyError
    why = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, LookupError) and "zone" in why.lower():
        why += " (this host's time-zone data lacks it: install or update tzdata here)"
    log.error(
        "job %s: cannot plan its calendar series on this replica (%s); it waits, and is "
        "asked again at each claim",
        job,
        why,
        exc_info=not known,
    )
    try:
        store.record_event("plan_failed", f"cannot plan its calendar series here: {why}", job)
    except Exception:  # noqa: BLE001 - the log line said it
        pass


BACKFILL_FIELDS = ("def", "gen", "anchor", "interval")


def occurrences(spec: JobSpec, h: dict[str, str | None], start: float, end: float) -> list[int]:
    """The occurrences (epoch ms) of a stored recurring job in [start, end), for
    backfill.lua; raises ValueError for a one-off job or an oversized window."""
    sched = spec.schedule
    if h.get("anchor") and h.get("interval"):  # the stored grid, in ms (exact)
        grid = (int(h["anchor"] or 0), intervals.decode(h["interval"] or "1"))
        ms = schedules.window(spec.job_id, None, grid, start * 1000, end * 1000)
        return [int(x) for x in ms]
    cron = sched if isinstance(sched, Cron) else None
    return [_ms(x) for x in schedules.window(spec.job_id, cron, None, start, end)]


def in_place(first: Sequence[Claim], more: Sequence[Claim], at: dict[str, int]) -> list[Claim]:
    """The claims of one claim's two calls in one line: ``first``'s, with the claim of a
    series planned in between (``at``: job -> how many of ``first``'s claims came before
    its plan) in the place its plan took, as in process, where the series' due entry is
    met there (docs/guarantees.md, "Misfires"), several in one place in the order of their
    plans (``at``'s: the order the first call met them in); ``more``'s other claims after."""
    rank = {job: i for i, job in enumerate(at)}
    at = dict(at)
    placed: dict[int, list[Claim]] = {}
    rest: list[Claim] = []
    for c in more:
        if c.job_id in at and c.attempt == 1:
            placed.setdefault(min(at.pop(c.job_id), len(first)), []).append(c)
        else:
            rest.append(c)
    for group in placed.values():
        group.sort(key=lambda c: rank[c.job_id])
    line: list[Claim] = []
    for i, c in enumerate(first):
        line += placed.get(i, ())
        line.append(c)
    return line + placed.get(len(first), []) + rest
