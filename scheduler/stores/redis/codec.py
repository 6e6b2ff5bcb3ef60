"""Job definitions as canonical JSON (the ``def`` field of a job hash), and back.

JSON only: a shared store holds registered task names with JSON arguments, never code.
Two equal definitions encode to the same text, which is how an upsert recognises them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from enum import Enum
from json.encoder import encode_basestring_ascii as _quote  # what json.dumps does to a str
from typing import Any, NamedTuple, TypeGuard

from scheduler import tasks, validation
from scheduler.errors import PayloadError, TaskNotRegisteredError
from scheduler.model import (
    AddResult,
    After,
    Ambiguous,
    At,
    Cron,
    Delivery,
    Event,
    Every,
    JobSpec,
    Misfire,
    Missing,
    Overlap,
    RetryPolicy,
    Schedule,
    Skip,
    TaskRef,
)
from scheduler.schedules import grace_for
from scheduler.stores.redis import calendar_plans, rates, script_args


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
        and (spec.retry is _DEFAULTS.retry or spec.retry == _DEFAULTS.retry)
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
    ):
        value = getattr(spec, name)
        if value != getattr(_DEFAULTS, name):
            d[key] = getattr(value, "value", value)
    if spec.retry != _DEFAULTS.retry:
        d["r"] = {k: v for k, v in asdict(spec.retry).items() if v != getattr(_DEFAULTS.retry, k)}
    return _CANONICAL.encode(d)


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
        kind, num = "every", rates.encode(s.interval)  # exact: "<ms>" or "<p>/<q>" ms
        anchor = "" if s.anchor is None else ms_up(s.anchor)
        grace = _ms(grace_for(s.interval, spec.misfire_grace))
    window = "" if spec.catch_up_window is None else _ms(spec.catch_up_window)
    wire = (_WIRE[spec.misfire], _WIRE[spec.overlap], _WIRE[spec.delivery])
    job, lane, stalls = spec.job_id, spec.lane, spec.retry.max_stalls
    return script_args.add(job, text, lane, kind, num, anchor, grace, wire, stalls, window)


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def ms_up(seconds: float) -> int:
    """A due instant (or delay) in whole ms, rounded up: a job never becomes due before
    the instant asked for (Redis TIME is floored to the ms). Rounding to the nanosecond
    first keeps float noise (0.3 * 1000 = 300.00000000000006) from adding a millisecond."""
    return math.ceil(round(seconds * 1000, 6))


RESULT_LIMIT = 64 * 1024  # bytes of a stored result; the commit may write past maxmemory


def events(f: Mapping[str, str]) -> list[Event]:
    """The state changes of one entry of the namespace's event stream, oldest first: THE
    parser of the stream's format, which every reader goes through (lua/include/events.lua).
    An entry holds one change (fields kind, job, sched, attempt, detail, at; a claim may add
    ready; a field that is missing reads as empty), or every change of one kind made by one
    batch script call (fields kind, detail, at, n, batch: one
    ``<sched>|<attempt>|<ready>|<job>`` line per change; attempt is empty for a change
    of no invocation, as add.lua's ``scheduled``). An entry (or a batch's line) that does
    not parse (garbage written by hand) reads as one ``malformed`` event that quotes it:
    it made ``duetime events``, ``show`` and ``stats`` fail for the whole namespace."""
    kind, detail = f.get("kind", "?"), f.get("detail", "")
    try:
        at = int(f.get("at") or 0) / 1000
    except ValueError:
        return [_malformed(0.0, f.get("job", ""), f"an entry of kind {kind!r}", f)]
    lines = f.get("batch")
    if lines is None:
        sched, attempt, ready = f.get("sched", ""), f.get("attempt", ""), f.get("ready", "")
        try:
            return [
                Event(
                    at=at,
                    kind=kind,
                    job_id=f.get("job", ""),
                    scheduled=int(sched) / 1000 if sched else None,
                    attempt=int(attempt) if attempt else None,
                    detail=detail,
                    ready=int(ready) / 1000 if ready else None,
                )
            ]
        except ValueError:
            return [_malformed(at, f.get("job", ""), f"an entry of kind {kind!r}", f)]
    out = []
    for line in lines.split("\n"):
        try:
            sched, attempt, ready, job = line.split("|", 3)
            out.append(
                Event(
                    at,
                    kind,
                    job,
                    int(sched) / 1000,
                    int(attempt) if attempt else None,
                    detail,
                    int(ready) / 1000 if ready else None,
                )
            )
        except ValueError:
            out.append(_malformed(at, "", f"a line of a {kind!r} batch", line))
    return out


def _malformed(at: float, job_id: str, what: str, raw: object) -> Event:
    text = repr(raw)
    shown = text if len(text) <= 200 else text[:200] + "..."
    return Event(at, "malformed", job_id, detail=f"{what} that does not parse: {shown}")


class RunningEntry(NamedTuple):
    """One entry of the namespace's RUNNING hash (token -> ``gen|sched|attempt|stalls|
    fence|job``, sched followed by ``@<ready>`` when its claim's ready is later;
    lua/include/issue.lua writes it), times in epoch seconds."""

    generation: int
    scheduled: float
    attempt: int
    stalls: int
    fence: int
    job_id: str
    ready: float | None = None  # its claim's ready, when later than scheduled


_AT_READY = re.compile(r"([0-9]+)(?:@([0-9]+))?")


def _at_ready(text: str) -> tuple[int, int | None]:
    """``<ms>`` or ``<ms>@<ready ms>`` (digits only, as the scripts read them)."""
    m = _AT_READY.fullmatch(text)
    if not m:
        raise ValueError(f"not <ms> or <ms>@<ms>: {text!r}")
    return int(m[1]), None if m[2] is None else int(m[2])


def running_entry(data: str) -> RunningEntry:
    """Parse one RUNNING entry (the one parser of that format on the Python side)."""
    gen, sched_text, attempt, stalls, fence, job = data.split("|", 5)
    sched, ready = _at_ready(sched_text)
    return RunningEntry(
        int(gen),
        sched / 1000,
        int(attempt),
        int(stalls),
        int(fence),
        job,
        None if ready is None else ready / 1000,
    )


def running_entries(entries: Mapping[str, str]) -> dict[str, RunningEntry]:
    """The RUNNING hash's entries that parse, by token, in its order: one that does not
    (garbage) is left to the claims' reaper and ``duetime doctor``, never a failed
    readout (it made ``duetime ls`` fail for the whole namespace)."""
    out = {}
    for token, data in entries.items():
        try:
            out[token] = running_entry(data)
        except (ValueError, TypeError):
            continue
    return out


def tokens_of(entries: Mapping[str, str], job_id: str) -> list[str]:
    """The tokens of ``job_id``'s entries in the RUNNING hash ``entries``."""
    return [t for t, r in running_entries(entries).items() if r.job_id == job_id]


def skip_entry(data: str) -> Skip:
    """Parse one entry of a job's skip list (``skips:<job>``: ``first|last|count|reason``,
    ms)."""
    first, last, count, reason = data.split("|", 3)
    return Skip(int(first) / 1000, int(last) / 1000, int(count), reason)


def dead_letter(job_id: str, data: str) -> Event:
    """Parse one entry of a job's dead-letter list (``dead:<job>``: JSON ``at``, ``sched``,
    ``attempt``, ``reason``; ms) as its ``dead_lettered`` event."""
    e = json.loads(data)
    return Event(
        e["at"] / 1000, "dead_lettered", job_id, e["sched"] / 1000, e["attempt"], e["reason"]
    )


def run_entry(data: str) -> tuple[float, int, float | None, float, str]:
    """Parse one entry of a job's run list (``runs:<job>``, lua/include/history.lua:
    ``sched|attempt|fence|started|ended|outcome``, ms): scheduled, attempt, started (None:
    not known), ended (epoch seconds) and outcome; ValueError if it does not parse."""
    sched, attempt, _fence, started, ended, outcome = data.split("|", 5)
    at = int(started) / 1000 if started else None
    return int(sched) / 1000, int(attempt), at, int(ended) / 1000, outcome


def member_job(member: str) -> str:
    """The job id of a due member (``<seq>|s|<job>``, ``<seq>|r|gen|sched[@ready]|attempt|
    stalls|<job>``; include/due.lua) or of a listing index entry (the job id itself)."""
    head = member.split("|", 2)
    if len(head) == 3 and head[1] == "s":
        return head[2]
    if len(head) == 3 and head[1] == "r":
        return member.split("|", 6)[-1]
    return member


def is_retry(member: str) -> bool:
    """Whether a due member is a retry's (``<seq>|r|...``: it holds its due time in its
    score only; the job hash counts pending retries, ``retries``)."""
    return member.split("|", 2)[1:2] == ["r"]


def queued_due(text: str) -> int:
    """The due time (ms) of a job's held occurrence, field ``queued`` (``<ms>|<k>``)."""
    return int(text.split("|", 1)[0])


_RERUN_LINE = re.compile(r"([0-9]+) ([^\n]+)\n")


def rerun_dues(text: str) -> list[int]:
    """The due times (ms) of a job's waiting re-runs, field ``reruns`` (lines ``<ms>
    <member>``, lua/include/reruns.lua); ValueError if it does not parse."""
    lines = _RERUN_LINE.findall(text)
    if sum(len(s) + len(m) + 2 for s, m in lines) != len(text):
        raise ValueError('field reruns is not lines of "<ms> <due member>"')
    return [int(s) for s, _ in lines]


def task_token(name: str) -> str:
    """A task name as job definitions spell it: JSON-escaped, without its quotes (how
    claim.lua names tasks, lua/include/serve.lua)."""
    return _quote(name)[1:-1]


def served_text(names: Sequence[str] | None) -> str:
    """claim.lua's list of the tasks a replica serves: ``"*"`` (None: every task), else
    ``"\n<task>\n...\n"`` (``"\n"``: none)."""
    return "*" if names is None else "\n" + "".join(task_token(n) + "\n" for n in names)


def served_names(text: str) -> list[str] | None:
    """``served_text`` read back (the ``tasks`` hash): the names, None for every task;
    a token that does not read back is shown as stored."""
    if text == "*":
        return None
    return [token_name(t) for t in text.split("\n") if t]


def token_name(token: str) -> str:
    """``task_token`` read back."""
    try:
        name = json.loads('"' + token + '"')
    except ValueError:
        return token
    return name if isinstance(name, str) else token


def owner_of(token: str) -> str:
    """The replica id inside a claim token (``<owner>:<n>``)."""
    return token.rsplit(":", 1)[0]


def _shown(value: Any) -> str:
    """``repr(value)``, or a note when the value's own ``__repr__`` fails (user code: an
    exception here used to fail the commit, and the job ran again after its lease)."""
    try:
        return repr(value)
    except BaseException as exc:  # noqa: BLE001 - anything may come out of user code
        return f"<a {type(value).__name__} whose repr() failed: {type(exc).__name__}>"


def result_json(value: Any) -> str:
    """A job's return value as JSON text (its repr, as a JSON string, if not JSON); a
    result over RESULT_LIMIT bytes is stored as a note saying so (the commit path may
    write when Redis is out of memory, so what it writes stays small)."""
    if value is None:  # the common case, without json.dumps
        return "null"
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):  # a set, NaN, a cycle, too deep
        text = json.dumps(_shown(value))
    if len(text) > RESULT_LIMIT:
        return json.dumps(
            f"<result of {len(text)} bytes not stored: over the {RESULT_LIMIT}-byte limit>"
        )
    return text


def is_int(value: object) -> TypeGuard[str]:
    """A Redis counter's text that ``int()`` reads (digits, an optional minus)."""
    return isinstance(value, str) and value.lstrip("-").isdigit() and value.isascii()


def add_result(reply: list[Any]) -> AddResult:
    """add.lua's reply as an ``AddResult``."""
    outcome, due_in = reply[:2]
    return AddResult(outcome, None if int(due_in) < 0 else int(due_in) / 1000)
