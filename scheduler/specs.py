"""Building a validated ``JobSpec`` from user input: shared by the engine and ``Client``.

Everything here raises before anything is written (docs/guarantees.md, bad input).
"""

from __future__ import annotations

import datetime as dt
import difflib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from scheduler import cron_rules, tasks, timeinput, validation
from scheduler.model import (
    DEFAULT_RETRY,
    After,
    At,
    Cron,
    Delivery,
    Every,
    JobSpec,
    Misfire,
    Overlap,
    RetryPolicy,
    Schedule,
    Target,
    TaskRef,
)

JobTarget = Callable[[], Any] | str


@dataclass(frozen=True)
class JobOption:
    """One option of a job's definition, as every producer takes it: a keyword of
    ``Client.enqueue``, ``AsyncClient.enqueue`` and the facades, and a flag of ``duetime
    enqueue`` (``cli`` is its spelling there; ``kind`` how the command line reads it)."""

    name: str
    cli: str
    kind: Literal["text", "duration", "choice", "retry", "int"]
    help: str
    choices: tuple[str, ...] = ()


#: A job's options, in one place: the Python calls take these keywords (``make_spec``'s),
#: the CLI builds its flags from this table (tests/unit/test_job_options.py holds them
#: together). A job's ``timeout`` is ``--job-timeout`` on the command line, where
#: ``--redis-timeout`` bounds each Redis call.
JOB_OPTIONS = (
    JobOption("lane", "--lane", "text", "The lane (worker pool) that runs it.  [default: default]"),
    JobOption("timeout", "--job-timeout", "duration", "Ask a run to stop after DURATION."),
    JobOption(
        "retry",
        "--retry",
        "retry",
        'Retry policy as JSON, e.g. \'{"max_attempts": 5, "backoff": 2}\' (fields: '
        "max_attempts, backoff, factor, max_backoff, jitter, max_stalls).",
    ),
    JobOption(
        "misfire",
        "--misfire",
        "choice",
        "A run missed by more than its grace: skip it, "
        "run it once, or catch up every one.  [default: skip]",
        tuple(m.value for m in Misfire),
    ),
    JobOption(
        "misfire_grace",
        "--misfire-grace",
        "duration",
        "A run later than this is missed (--misfire decides).  [default: the interval, at "
        "most 60s]",
    ),
    JobOption(
        "catch_up_window",
        "--catch-up-window",
        "duration",
        "--misfire catch_up: older missed runs are skipped.  [default: none is]",
    ),
    JobOption(
        "overlap",
        "--overlap",
        "choice",
        "A run due while the last one runs: skip it, queue it, or allow both.  [default: skip]",
        tuple(o.value for o in Overlap),
    ),
    JobOption(
        "delivery",
        "--delivery",
        "choice",
        "After a lost owner: run again or never.  [default: at_least_once]",
        tuple(d.value for d in Delivery),
    ),
    JobOption(
        "priority",
        "--priority",
        "int",
        "Among due jobs of its lane, a higher priority starts first (-10 to 10).  [default: 0]",
    ),
    JobOption(
        "limit_key",
        "--limit-key",
        "text",
        "The key whose limits it shares (e.g. customer:42); keys take turns.  [default: none]",
    ),
    JobOption(
        "result_ttl",
        "--result-ttl",
        "duration",
        "Keep a run's result this long after it ends (a recurring job: every run's).  "
        "[default: 1d, a recurring job's runs only when waited for]",
    ),
)
# make_spec's options, and the other keywords of the calls that take them (for hints)
OPTIONS = ("kwargs", *(o.name for o in JOB_OPTIONS))
_KNOWN = (*OPTIONS, "job_id", "delay", "at", "every", "anchor", "cron", "tz", "allow_past")


def check_options(options: Mapping[str, Any], call: str) -> None:
    """A ``TypeError`` that names an unknown option, with the nearest known one (Python's
    own said ``make_spec() got an unexpected keyword argument``)."""
    for key in options:
        if key not in OPTIONS:
            near = difflib.get_close_matches(str(key), _KNOWN, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise TypeError(
                f"{call}() got an unknown option {key!r}{hint}; its options are "
                f"{', '.join(OPTIONS)}"
            )


def make_spec(
    fn: JobTarget,
    schedule: Schedule,
    *,
    job_id: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    lane: str = "default",
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    misfire: Misfire | str = Misfire.SKIP,
    misfire_grace: float | None = None,
    catch_up_window: float | None = None,
    overlap: Overlap | str = Overlap.SKIP,
    delivery: Delivery | str = Delivery.AT_LEAST_ONCE,
    priority: int = 0,
    limit_key: str | None = None,
    result_ttl: float | str | None = None,
    check_task: bool = True,
) -> JobSpec:
    """A validated job definition. ``fn`` is a callable or a registered task name (with
    JSON ``kwargs``); ``check_task=False`` accepts names this process has not registered
    (a producer that only enqueues)."""
    spec = object.__new__(JobSpec)  # JobSpec(...) of a frozen dataclass costs ~3x more
    spec.__dict__.update(
        job_id=new_id() if job_id is None else validation.job_id(job_id),
        target=target(fn, kwargs, check_task),
        schedule=schedule,
        lane=_lane(lane),
        timeout=validation.optional_positive(timeout, "timeout"),
        retry=_retry(retry),
        misfire=misfire if type(misfire) is Misfire else Misfire(misfire),
        misfire_grace=(
            None if misfire_grace is None else validation.delay(misfire_grace, "misfire_grace")
        ),
        catch_up_window=(
            None
            if catch_up_window is None
            else validation.delay(catch_up_window, "catch_up_window")
        ),
        overlap=overlap if type(overlap) is Overlap else Overlap(overlap),
        delivery=delivery if type(delivery) is Delivery else Delivery(delivery),
        priority=0 if priority == 0 and type(priority) is int else validation.priority(priority),
        limit_key=None if limit_key is None else validation.limit_key(limit_key),
        result_ttl=None if result_ttl is None else validation.result_ttl(result_ttl),
    )
    if (
        misfire_grace is not None
        or catch_up_window is not None
        or spec.misfire is not Misfire.SKIP
        or spec.overlap is not Overlap.SKIP
    ) and not spec.recurring:
        given = [f"{name}=" for name in series_options_given(spec)]
        raise ValueError(
            f"{' and '.join(given)} {'applies' if len(given) == 1 else 'apply'} to recurring "
            "jobs (every=, cron=) only: a one-off job runs once, late if it must (leave "
            f"{'it' if len(given) == 1 else 'them'} out)"
        )
    return spec


#: The options only a recurring job has a use for: a one-off's only run is never skipped,
#: coalesced or overlapped (docs/guarantees.md#misfires); given for one, they are refused.
SERIES_ONLY = {
    "misfire": Misfire.SKIP,
    "misfire_grace": None,
    "catch_up_window": None,
    "overlap": Overlap.SKIP,
}


def series_options_given(values: Any) -> list[str]:
    """The names of ``SERIES_ONLY`` whose value (an attribute of ``values``) is not its
    default."""
    return [name for name, default in SERIES_ONLY.items() if getattr(values, name) != default]


def new_id() -> str:
    """A new job id: ``uuid.uuid4().hex`` (the same 32 hex digits, version 4, RFC 4122
    variant), without building the UUID object."""
    n = int.from_bytes(os.urandom(16), "big")
    return "%032x" % ((n & ~(0xF000 << 64) | (0x4000 << 64)) & ~(0xC000 << 48) | (0x8000 << 48))


def schedule_of(
    *,
    delay: float | str | None = None,
    at: dt.datetime | float | None = None,
    every: float | str | None = None,
    anchor: dt.datetime | float | None = None,
    cron: str | Cron | None = None,
    tz: str | None = None,
    allow_past: bool = False,
    now: float | None = None,
) -> Schedule:
    """Exactly one of ``delay``, ``at``, ``every`` (with an optional ``anchor``) or
    ``cron`` (an expression with an optional ``tz``, or a ``Cron`` with its policies).
    ``delay`` and ``every`` may be duration strings (``"90s"``). An ``at`` more than 24 h
    before ``now`` (epoch seconds, default the local clock) is refused unless
    ``allow_past``."""
    alone = at is None and every is None and cron is None and anchor is None and tz is None
    if alone and delay is not None:  # the common case: a delay alone, without the checks below
        return After(validation.delay(delay, "delay"))
    given = [
        name
        for name, v in (("delay", delay), ("at", at), ("every", every), ("cron", cron))
        if v is not None
    ]
    if len(given) != 1:
        raise ValueError(
            f"give exactly one of delay=, at=, every= or cron= (got {given or 'none'})"
        )
    if anchor is not None and every is None:
        raise ValueError("anchor= only applies to every=")
    if tz is not None and cron is None:
        raise ValueError("tz= only applies to cron=")
    if cron is not None:
        return cron_schedule(cron, tz)
    if delay is not None:
        return After(validation.delay(delay, "delay"))
    if at is not None:
        t = epoch(at, "at")
        wall = time.time() if now is None else now
        timeinput.check_past(t, wall, "at", allow_past, "allow_past=True")
        return At(t)
    assert every is not None
    return Every(
        validation.recurrence(every, "every"), None if anchor is None else epoch(anchor, "anchor")
    )


def cron_schedule(cron: str | Cron, tz: str | None = None) -> Cron:
    """A validated ``Cron`` from an expression (in ``tz``, default UTC) or a ``Cron``."""
    if isinstance(cron, Cron):
        if tz is not None and tz != cron.tz:
            raise ValueError(f"tz={tz!r} contradicts the Cron's tz={cron.tz!r}; give one")
        return cron_rules.validate(cron)
    if not isinstance(cron, str):
        raise TypeError(
            f"cron must be an expression string or a Cron, got {validation.shown_value(cron, 80)}"
        )
    return cron_rules.validate(Cron(cron, "UTC" if tz is None else tz))


def target(fn: JobTarget, kwargs: Mapping[str, Any] | None, check_task: bool) -> Target:
    if isinstance(fn, str):
        name = validation.name(fn, "task name")
        # unknown here: say so now rather than at run time; known: check the arguments
        task_fn = tasks.lookup(name) if check_task else tasks.registered(name)
        return _task_ref(task_fn, name, kwargs)
    validation.callable_job(fn)
    if kwargs is not None:
        registered = tasks.name_of(fn)
        if registered is None:
            name = getattr(fn, "__qualname__", type(fn).__name__)
            raise TypeError(
                f"kwargs= is for registered tasks, and {name} is not one: register it with "
                "@task (a shared store runs registered tasks only), or, in process, bind "
                "its arguments with functools.partial"
            )
        return _task_ref(fn, registered, kwargs)
    tasks.check_no_arguments(fn)
    return fn


def _task_ref(
    fn: Callable[..., Any] | None, name: str, kwargs: Mapping[str, Any] | None
) -> TaskRef:
    """The stored form of task ``name`` called with ``kwargs``; when this process has its
    function, the arguments' names are checked against its signature first."""
    args = validation.kwargs(kwargs)
    if fn is not None:
        tasks.check_arguments(fn, name, args)
    return TaskRef(name, validation.json_args(args))


def _lane(lane: str) -> str:
    if type(lane) is str and lane == "default":  # the common case, without the checks
        return lane
    return validation.name(lane, "lane name")


def _retry(retry: RetryPolicy | None) -> RetryPolicy:
    if retry is None:
        return DEFAULT_RETRY
    if not isinstance(retry, RetryPolicy):
        raise TypeError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
    return retry


def epoch(when: dt.datetime | float, name: str) -> float:
    """Epoch seconds from an aware datetime or a number."""
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            raise ValueError(
                f"{name} must be a timezone-aware datetime (naive times are "
                "ambiguous); use datetime.now(timezone.utc) or zoneinfo"
            )
        return when.timestamp()
    if isinstance(when, str):  # a time as text: the CLI reads it, the API takes datetimes
        raise TypeError(
            f"{name} must be an aware datetime or epoch seconds, got a string ({when!r}); "
            "parse it first, e.g. datetime.fromisoformat(...)"
        )
    return validation.timestamp(when, name)
