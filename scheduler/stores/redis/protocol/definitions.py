"""Job definitions as canonical JSON (the ``def`` field of a job hash), and back.

JSON only: a shared store holds registered task names with JSON arguments, never code.
Two equal definitions encode to the same text, which is how an upsert recognises them.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import asdict
from enum import Enum
from json.encoder import encode_basestring_ascii as _quote  # what json.dumps does to a str
from typing import Any

from scheduler import tasks, validation
from scheduler.errors import PayloadError, TaskNotRegisteredError
from scheduler.flow import queue_of
from scheduler.model import (
    After,
    Ambiguous,
    At,
    Cron,
    Delivery,
    Every,
    JobSpec,
    Misfire,
    Missing,
    Overlap,
    RetryPolicy,
    Schedule,
    TaskRef,
    TraceContext,
)
from scheduler.schedules import grace_for
from scheduler.stores.redis.claiming import calendar_plans
from scheduler.stores.redis.protocol import intervals, script_args

log = logging.getLogger("duetime.tracing")


def task_ref(target: Any) -> TaskRef:
    """The TaskRef a shared store can hold for ``target``, or a clear error."""
    if isinstance(target, TaskRef):
        return target
    name = tasks.name_of(target) if callable(target) else None
    if name is None:
        raise TaskNotRegisteredError(
            f"{target!r} cannot be stored in a shared store: jobs there are registered tasks "
            "referenced by name (lambdas, closures and unregistered functions cannot be sent "
            "to other processes). Define a module-level function, decorate it with "
            "@scheduler.task('name'), and import its module in every replica (--import)"
        )
    return TaskRef(name, "{}")


def _schedule(s: Schedule) -> list[Any]:
    if isinstance(s, After):
        return ["after", s.delay]
    if isinstance(s, At):
        return ["at", s.wall]
    if isinstance(s, Cron):
        return ["cron", s.expr, s.tz, s.ambiguous.value, s.missing.value, s.jitter]
    return ["every", s.interval] if s.anchor is None else ["every", s.interval, s.anchor]


_DEFAULTS = JobSpec("-", TaskRef("-"), After(0))


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))  # built once


_finite = math.isfinite


def encode(spec: JobSpec) -> str:
    """Compact canonical JSON: the task, the schedule, and only the options that differ
    from their defaults (a pending job's definition is often under 50 bytes). The text is
    ``json.dumps(d, sort_keys=True, separators=(",", ":"))`` of that dict; a one-off or
    fixed-rate job with default options (the common case) has it built directly, to the
    same bytes (tests/unit/test_codec_fast.py compares both ways)."""
    ref = task_ref(spec.target)
    s = spec.schedule
    kind = type(s)
    head = '{"s":' if ref.args_json == "{}" else '{"a":' + _quote(ref.args_json) + ',"s":'
    if kind is After or kind is At:
        value = s.delay if kind is After else s.wall  # type: ignore[union-attr]
        if type(value) is float and _finite(value) and _plain(spec):
            text = ('["after",' if kind is After else '["at",') + float.__repr__(value) + "]"
            return head + text + ',"t":' + _quote(ref.name) + "}"
    return encode_slow(spec)


def _plain(spec: JobSpec) -> bool:
    """Every option at its default, by identity or exact type (else encode_slow decides)."""
    return (
        spec.misfire is Misfire.SKIP
        and spec.overlap is Overlap.SKIP
        and spec.delivery is Delivery.AT_LEAST_ONCE
        and spec.timeout is None
        and spec.misfire_grace is None
        and spec.catch_up_window is None
        and type(spec.lane) is str
        and spec.lane == "default"
        and spec.priority == 0
        and spec.limit_key is None
        and spec.result_ttl is None
        and (spec.retry is _DEFAULTS.retry or spec.retry == _DEFAULTS.retry)
        and spec.trace is None
    )


def encode_slow(spec: JobSpec) -> str:
    """``encode`` of any spec, by building the dict and dumping it."""
    ref = task_ref(spec.target)
    d: dict[str, Any] = {"t": ref.name, "s": _schedule(spec.schedule)}
    if ref.args_json != "{}":
        d["a"] = ref.args_json
    for key, name in (
        ("l", "lane"),
        ("to", "timeout"),
        ("m", "misfire"),
        ("g", "misfire_grace"),
        ("w", "catch_up_window"),
        ("o", "overlap"),
        ("d", "delivery"),
        ("p", "priority"),
        ("k", "limit_key"),
        ("rt", "result_ttl"),  # seconds; put.lua keeps it as the job field `keep` (ms)
    ):
        value = getattr(spec, name)
        if value != getattr(_DEFAULTS, name):
            d[key] = getattr(value, "value", value)
    if spec.retry != _DEFAULTS.retry:
        d["r"] = {k: v for k, v in asdict(spec.retry).items() if v != getattr(_DEFAULTS.retry, k)}
    if spec.trace is not None:  # "x" sorts after every other key: the text's last member
        d["x"] = trace_json(spec.trace)
    return _CANONICAL.encode(d)


def trace_json(trace: TraceContext) -> dict[str, str]:
    """A definition's ``x`` member: the enqueue's W3C trace context (docs/tracing.md)."""
    out = {"traceparent": trace.traceparent}
    if trace.tracestate:
        out["tracestate"] = trace.tracestate
    return out


def trace_of(value: Any, job_id: str) -> TraceContext | None:
    """A definition's ``x`` member read leniently: a trace context that is not two strings
    of a sane size (written by another program, or by hand) is ignored with a DEBUG line,
    never a reason to refuse the job (whether the header itself is valid W3C is judged
    where a span is started, scheduler/tracing.py)."""
    if isinstance(value, dict):
        parent, state = value.get("traceparent"), value.get("tracestate", "")
        if isinstance(parent, str) and isinstance(state, str) and len(parent) + len(state) < 600:
            return TraceContext(parent, state)
    log.debug("job %s: its trace context %.80r is not one; ignored", job_id, value)
    return None


UNREADABLE = (ValueError, KeyError, TypeError)  # what decode raises for data that does not parse


def decode(text: str, job_id: str) -> JobSpec:
    """A stored definition as a ``JobSpec``. Raises ValueError, KeyError or TypeError for
    data that does not parse, including arguments that are not a JSON object (so a
    claim of such a job is moved aside at once, never run with a wrong call)."""
    d = validation.loads(text)
    if not isinstance(d, dict):
        raise TypeError(f"the definition is a JSON {type(d).__name__}, not an object")
    args = d.get("a", "{}")
    if not isinstance(args, str) or not isinstance(validation.loads(args), dict):
        raise TypeError("the job's arguments are not a JSON object")
    kind, *s = d["s"]
    schedule: Schedule
    if kind == "after":
        schedule = After(s[0])
    elif kind == "at":
        schedule = At(s[0])
    elif kind == "every":
        schedule = Every(s[0], s[1] if len(s) > 1 else None)
    elif kind == "cron":
        schedule = Cron(s[0], s[1], Ambiguous(s[2]), Missing(s[3]), s[4])
    else:
        raise ValueError(f"unknown schedule kind {kind!r}")
    name = d["t"]
    spec = object.__new__(JobSpec)  # JobSpec(...) of a frozen dataclass costs ~4x more
    fields = spec.__dict__
    fields.update(_DEFAULT_FIELDS)
    fields["job_id"], fields["target"], fields["schedule"] = job_id, TaskRef(name, args), schedule
    for key, field, convert in _OPTIONS:
        if key in d:
            fields[field] = convert(d[key])
    if "x" in d:
        fields["trace"] = trace_of(d["x"], job_id)
    return spec


def _retry(value: Any) -> RetryPolicy:
    return RetryPolicy(**value)


def _same(value: Any) -> Any:
    return value


_DEFAULT_FIELDS = dict(_DEFAULTS.__dict__)


_OPTIONS: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
    ("l", "lane", _same),
    ("to", "timeout", _same),
    ("r", "retry", _retry),
    ("m", "misfire", Misfire),
    ("g", "misfire_grace", _same),
    ("w", "catch_up_window", _same),
    ("o", "overlap", Overlap),
    ("d", "delivery", Delivery),
    ("p", "priority", validation.priority),
    ("k", "limit_key", validation.limit_key),
    ("rt", "result_ttl", validation.result_ttl),
)


# a policy's text in add.lua's arguments (an Enum's ``.value`` is a property: ~3x the cost)
_WIRE: dict[Enum, str] = {m: m.value for kind in (Misfire, Overlap, Delivery) for m in kind}


def add_args(spec: JobSpec, payload_limit: int, redis_now_ms: Callable[[], int]) -> list[Any]:
    """add.lua's arguments (after the prefix and now) for ``spec``; raises before
    anything is sent if the job cannot be stored. ``redis_now_ms`` is asked only for a
    calendar job (its first occurrence is computed from Redis's clock)."""
    text = encode(spec)  # refuses callables that are not registered tasks
    args = spec.target.args_json if isinstance(spec.target, TaskRef) else "{}"
    size = len(args) if args.isascii() else len(args.encode())
    if size > payload_limit:
        raise PayloadError(
            f"job arguments are {size} bytes of JSON, over the "
            f"{payload_limit}-byte limit; store large data elsewhere and "
            "pass a reference"
        )
    s = spec.schedule
    anchor: int | str = ""
    num: int | str
    if isinstance(s, After):
        kind, num, grace = "after", ms_up(s.delay), 0
    elif isinstance(s, At):
        kind, num, grace = "at", ms_up(s.wall), 0
    elif isinstance(s, Cron):
        kind, (num, anchor) = "cron", calendar_plans.first_two(spec, redis_now_ms())
        grace = -1 if spec.misfire_grace is None else _ms(spec.misfire_grace)
    else:
        if s.interval < 0.001:
            raise ValueError(
                f"interval {s.interval!r}s is below 1 ms, the resolution of a shared store "
                "(its due times are epoch milliseconds): use an interval of at least 0.001 s"
            )
        kind, num = "every", intervals.encode(s.interval)  # exact: "<ms>" or "<p>/<q>" ms
        anchor = "" if s.anchor is None else ms_up(s.anchor)
        grace = _ms(grace_for(s.interval, spec.misfire_grace))
    window = "" if spec.catch_up_window is None else _ms(spec.catch_up_window)
    wire = (_WIRE[spec.misfire], _WIRE[spec.overlap], _WIRE[spec.delivery])
    job, stalls = spec.job_id, spec.retry.max_stalls
    lane = queue_of(spec.lane, spec.priority, spec.limit_key)  # its queue (lua/include/flow.lua)
    return script_args.add(job, text, lane, kind, num, anchor, grace, wire, stalls, window)


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def ms_up(seconds: float) -> int:
    """A due instant (or delay) in whole ms, rounded up: a job never becomes due before
    the instant asked for (Redis TIME is floored to the ms). Rounding to the nanosecond
    first keeps float noise (0.3 * 1000 = 300.00000000000006) from adding a millisecond."""
    return math.ceil(round(seconds * 1000, 6))
