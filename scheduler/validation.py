"""Every input check (docs/guarantees.md, bad input), in one place. Each raises before
anything is written."""

from __future__ import annotations

import inspect
import json
import math
import reprlib
import types
from collections.abc import Callable, Mapping
from typing import Any

from scheduler import timeinput
from scheduler.errors import PayloadError, ProgressError, ResultNotJSONError

MAX_ID_LENGTH = 200
DEFAULT_PAYLOAD_LIMIT = 64 * 1024
# The most levels of lists and objects in job arguments, whatever the Python: its JSON
# parser gives up at ~1,000 levels before 3.13 and ~10,000 on 3.13, so arguments a 3.13
# producer could store would be unreadable to a replica on 3.10-3.12
MAX_DEPTH = 256
# Due times stay inside what a datetime can show (before the year 10000, UTC): a job
# further out made `duetime ls` fail for its whole namespace ("year 33715 is out of
# range"). Delays and intervals: at most 1e11 s (~3,170 years) from now.
MAX_SECONDS = 1e11
MAX_EPOCH = 253402300799.0  # 9999-12-31T23:59:59Z


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    f = float(value)
    if math.isnan(f) or math.isinf(f):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return f


def finite(value: object, name: str) -> float:
    """A finite number of seconds (not a bool), as a float."""
    return _number(name, value)


def _seconds(name: str, value: object) -> float:
    """A number of seconds, or a duration string (``"90s"``, ``"1h30m"``, ``"PT1H"``:
    ``scheduler.timeinput``)."""
    if isinstance(value, str):
        return timeinput.parse_duration(value, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{name} must be a number of seconds or a duration string such as '90s', "
            f"'1h30m' or 'PT1H', got {type(value).__name__}"
        )
    return _number(name, value)


def delay(value: object, name: str = "delay_seconds") -> float:
    """A delay: a finite number ≥ 0 (0 means "as soon as possible"), or a duration
    string."""
    f = _seconds(name, value)
    if f < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return _at_most(f, name, value)


RESULT_TTL_RANGE = (1.0, 30 * 86400.0)  # seconds a job's results are kept (docs/results.md)


def result_ttl(value: object) -> float:
    """How long a job's results are kept after a run ends: seconds (or a duration string)
    from 1 s to 30 days, whole milliseconds (a shared store expires keys by the ms)."""
    f = _seconds("result_ttl", value)
    low, high = RESULT_TTL_RANGE
    if not low <= f <= high:
        raise ValueError(
            f"result_ttl must be from 1 s to 30 days ({high:.0f} s), got {value!r}; "
            "results are kept a day by default"
        )
    return round(f, 3)


MIN_RECURRENCE = 1e-6  # seconds: the shortest interval of an in-process recurring job


def interval(value: object, name: str = "interval_seconds") -> float:
    """A recurrence interval: a finite number > 0, or a duration string."""
    f = _seconds(name, value)
    if f <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return _at_most(f, name, value)


def recurrence(value: object, name: str = "interval_seconds") -> float:
    """A recurring job's interval: as ``interval``, and at least ``MIN_RECURRENCE`` (a
    nanosecond's interval spun the dispatcher under its lock; the shared store's own
    floor is a millisecond)."""
    f = interval(value, name)
    if f < MIN_RECURRENCE:
        raise ValueError(f"{name} must be at least 1e-06 s (a microsecond), got {value!r}")
    return f


def _at_most(f: float, name: str, value: object) -> float:
    if f > MAX_SECONDS:
        raise ValueError(f"{name} must be at most 1e11 s (about 3,170 years), got {value!r}")
    return f


def timestamp(value: object, name: str) -> float:
    """An absolute time in epoch seconds (finite, before the year 10000; may be past)."""
    f = _number(name, value)
    if f > MAX_EPOCH:
        raise ValueError(
            f"{name} must be before the year 10000 (epoch seconds <= {MAX_EPOCH:.0f}), "
            f"got {value!r}"
        )
    return f


def lanes(
    num_workers: int, given: Mapping[str, Any] | None
) -> tuple[dict[str, int], dict[str, Any]]:
    """``lanes=`` checked: each lane's worker count (the ``"default"`` lane's is
    ``num_workers``), and the ``Lane`` of each process lane. A lane is an int (threads) or
    a ``scheduler.Lane``; anything else is refused in one line."""
    from scheduler.lane import Lane

    if isinstance(num_workers, bool) or not isinstance(num_workers, int):
        raise TypeError(f"num_workers must be an int, got {type(num_workers).__name__}")
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    sizes: dict[str, int] = {"default": num_workers}
    process: dict[str, Any] = {}
    for lane, spec in (given or {}).items():
        if isinstance(spec, Lane):
            sizes[lane] = spec.workers
            if spec.isolation == "process":
                process[lane] = spec
        elif isinstance(spec, int) and not isinstance(spec, bool):
            sizes[lane] = spec
        else:
            raise TypeError(
                f"lane {lane!r}: give a worker count (an int: threads) or a scheduler.Lane "
                f"(e.g. Lane(workers=2, isolation='process')), got {type(spec).__name__}"
            )
    return sizes, process


def lane_timeouts(given: Mapping[str, float | str], lanes: Mapping[str, int]) -> dict[str, float]:
    """The lanes' timeouts, checked: each a duration, each of a lane the scheduler has (a
    typo would leave the lane meant without one)."""
    unknown = sorted(set(given) - set(lanes))
    if unknown:
        raise ValueError(
            f"lane_timeouts names lane(s) {unknown} that this scheduler does not have; its "
            f"lanes: {', '.join(sorted(lanes))}"
        )
    return {k: interval(v, f"timeout of lane {k!r}") for k, v in given.items()}


def optional_positive(value: object, name: str) -> float | None:
    return None if value is None else interval(value, name)


def wait_limit(value: object, name: str) -> float | None:
    """How long to wait: seconds >= 0, or None (also ``math.inf``) for no limit."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None, got {type(value).__name__}")
    f = float(value)
    if f == math.inf:
        return None
    if not f >= 0:  # nan, -inf, negative
        raise ValueError(
            f"{name} must be a number of seconds >= 0, or None to wait without limit, got {value!r}"
        )
    return f


PRIORITY_RANGE = (-10, 10)


def priority(value: object) -> int:
    """A job's priority: an integer from -10 to 10 (higher starts first among due jobs)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"priority must be an integer from {PRIORITY_RANGE[0]} to {PRIORITY_RANGE[1]}, "
            f"got {shown_value(value, 40)}"
        )
    if not PRIORITY_RANGE[0] <= value <= PRIORITY_RANGE[1]:
        raise ValueError(
            f"priority must be from {PRIORITY_RANGE[0]} to {PRIORITY_RANGE[1]} (higher starts "
            f"first; 0 is the default), got {value}"
        )
    return value


def limit_key(value: object) -> str:
    """A limit key: 1-200 printable characters, not ending in ``*`` (a limit's pattern)."""
    key = name(value, "limit key")
    if key.endswith("*"):
        raise ValueError(
            f"limit key {key!r} ends in '*', which names a pattern of keys in a limit; give "
            "the job its own key (e.g. 'customer:42')"
        )
    return key


DOT_SEGMENTS = (".", "..")  # a path segment browsers resolve: the console could not link it


def job_id(value: object) -> str:
    """A job id: 1–200 printable characters (no control characters, no surrounding blanks)."""
    if not isinstance(value, str):
        raise ValueError(f"job id must be a string, got {type(value).__name__}")
    if not 1 <= len(value) <= MAX_ID_LENGTH:
        raise ValueError(f"job id must be 1-{MAX_ID_LENGTH} characters, got {len(value)}")
    if not value.isprintable() or value != value.strip():
        raise ValueError(
            f"job id must be printable text without leading/trailing spaces: {value!r}"
        )
    if value in DOT_SEGMENTS:
        raise ValueError(f"job id cannot be {value!r}: a URL path would read it as a folder")
    return value


def name(value: object, what: str) -> str:
    """A lane or task name: same rules as a job id."""
    try:
        return job_id(value)
    except ValueError as exc:
        raise ValueError(str(exc).replace("job id", what)) from None


def callable_job(fn: object, name: str = "job") -> Callable[[], Any]:
    runnable(fn, name)
    if not callable(fn):
        raise TypeError(f"{name} must be callable, got {type(fn).__name__}")
    return fn


def runnable(fn: object, what: str) -> None:
    """Refuse what can never run as a job (issue 14): a coroutine object (a called
    ``async def``) or an async generator function; the message says what to pass."""
    if type(fn) is types.FunctionType:  # a plain function is never awaitable: its flags say
        if fn.__code__.co_flags & inspect.CO_ASYNC_GENERATOR:
            _async_generator(what)
        if fn.__code__.co_flags & inspect.CO_GENERATOR:
            _generator(what)
        return
    if inspect.iscoroutine(fn) or inspect.isawaitable(fn):
        if inspect.iscoroutine(fn):
            fn.close()  # no "never awaited" warning: the caller is told instead
        raise TypeError(
            f"{what} is an awaitable (a called async def), not a function: pass the "
            "function itself, e.g. schedule(fetch, ...) rather than schedule(fetch(), ...); "
            "bind arguments with functools.partial or kwargs="
        )
    if inspect.isasyncgenfunction(fn):
        _async_generator(what)
    if inspect.isgeneratorfunction(fn) or inspect.isgeneratorfunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object whose __call__ yields
    ):
        _generator(what)


def _generator(what: str) -> None:
    raise TypeError(
        f"{what} is a generator function: calling it runs none of its body (it returns a "
        "generator): wrap it, e.g. def job(): for item in gen(): ..."
    )


def _async_generator(what: str) -> None:
    raise TypeError(
        f"{what} is an async generator function, which cannot be awaited once: wrap it, "
        "e.g. async def job(): async for item in gen(): ..."
    )


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel = 4  # lists and objects nested deeper are shown as [...] and {...}
_SHOWN.maxstring = _SHOWN.maxother = 60


def shown_value(value: object, width: int) -> str:
    """``value``'s repr for an error message, at most ``width`` characters, however deep
    it nests (reprlib stops at a few levels: a plain ``repr`` of a list 1,200 levels deep
    raised RecursionError while the message was being built)."""
    try:
        shown = _SHOWN.repr(value)
    except RecursionError:  # an object's own __repr__ that recurses
        shown = f"<{type(value).__name__} object>"
    return shown if len(shown) <= width else shown[: width - 3] + "..."


def kwargs(value: object) -> dict[str, Any]:
    """A task's keyword arguments: a mapping of argument names (str) to JSON values;
    ``None`` means none."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        shown = shown_value(value, 60)
        raise TypeError(
            f"kwargs must be a mapping of argument names to JSON values, such as "
            f'{{"user_id": 7}}; got {type(value).__name__} {shown}'
        )
    for key in value:
        if not isinstance(key, str):
            raise TypeError(
                "kwargs keys must be argument names (str); got "
                f"{type(key).__name__} {shown_value(key, 60)}"
            )
    return value if type(value) is dict else dict(value)  # a copy only of other mappings


# JSON's encoder with the canonical settings, built once (json.dumps builds one per call)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)


def _canonical_encode() -> Callable[[object], str]:
    """``_CANONICAL.encode``, or the same C encoder it builds on every call, built once
    (~1 us less per job): without its circular-reference markers, which an encoding that
    fails can leave behind; a value that contains itself then ends in RecursionError,
    as one nested too deeply does."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator (another Python)
        return _CANONICAL.encode
    escape = json.encoder.encode_basestring_ascii
    chunks = make(None, _CANONICAL.default, escape, None, ":", ",", True, False, False)
    return lambda value: "".join(chunks(value, 0))


_encode = _canonical_encode()

# exact types whose JSON text reads back equal (finite floats: allow_nan=False refuses the rest)
_EXACT = frozenset((str, int, float, bool, type(None)))


def _flat(args: object) -> bool:
    """A dict of str keys to values of the exact types in _EXACT: its JSON round trip is
    exact, so the decode-and-compare check can be skipped (anything else takes it)."""
    if type(args) is not dict:
        return False
    for key, value in args.items():
        if type(key) is not str or type(value) not in _EXACT:
            return False
    return True


def _deeper_than(value: object, limit: int) -> bool:
    """Do lists and objects nest more than ``limit`` levels deep in ``value``? (A walk
    with a stack of its own: no recursion, however deep.)"""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list, tuple)):
                if depth == limit:
                    return True
                todo.append((child, depth + 1))
    return False


_TOO_DEEP = (
    f"job arguments are nested too deeply (more than {MAX_DEPTH} levels of lists and "
    "objects), or contain themselves; flatten them or pass a reference"
)


def json_args(args: object, limit: int = DEFAULT_PAYLOAD_LIMIT) -> str:
    """Encode job arguments as canonical JSON; refuse what would not round-trip, and
    lists and objects nested more than ``MAX_DEPTH`` levels deep."""
    try:
        text = _encode(args)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"job arguments must be JSON-serialisable: {exc}") from None
    except RecursionError:  # was raised as it was, from deep inside json
        raise PayloadError(_TOO_DEEP) from None
    if not _flat(args):
        # at most as deep as it has brackets (those in strings too): most skip the walk
        if text.count("[") + text.count("{") > MAX_DEPTH and _deeper_than(args, MAX_DEPTH):
            raise PayloadError(_TOO_DEEP)
        if json.loads(text) != args:
            raise PayloadError(
                "job arguments do not survive a JSON round trip (tuples, non-str dict "
                "keys?); pass lists and str-keyed dicts"
            )
    size = len(text)  # ensure_ascii: one byte per character
    if size > limit:
        raise PayloadError(
            f"job arguments are {size} bytes of JSON, over the {limit}-byte limit; "
            "store large data elsewhere and pass a reference"
        )
    return text


def loads(text: str) -> Any:
    """``json.loads``, except that JSON nested deeper than this Python parses (~1,000
    levels before 3.13) raises ValueError, as any text that does not parse does: data
    stored by a newer Python or by hand is malformed data, never a RecursionError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply for this Python to parse") from None


# ---- what a running job hands back: its result, its progress (docs/results.md) ----------

RESULT_LIMIT = 64 * 1024  # bytes of a job's result as JSON (a shared store keeps it so)
PROGRESS_LIMIT = 4096  # bytes of a progress report as JSON (progress.lua refuses more)


def result_problem(value: Any) -> ResultNotJSONError | None:
    """Why a job's return value cannot be its result (not JSON, or over RESULT_LIMIT
    bytes as JSON): the invocation then fails with this error; None when it can."""
    kind = type(value)
    if (
        value is None
        or kind is int
        or kind is bool
        or (kind is str and len(value) * 6 < RESULT_LIMIT)
    ):
        return None  # the common cases, without json.dumps
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return ResultNotJSONError(
            f"the job returned a {type(value).__name__}, which is not JSON ({_why(exc)}): "
            "return JSON values only (dict, list, str, int, float, bool, None)"
        )
    if len(text.encode()) > RESULT_LIMIT:
        return ResultNotJSONError(
            f"the job's result is {len(text.encode())} bytes as JSON, over the "
            f"{RESULT_LIMIT}-byte limit: store large data elsewhere and return its key"
        )
    return None


def progress_json(value: Any) -> str:
    """A progress report as JSON text, or ``ProgressError`` saying what to fix."""
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ProgressError(
            f"progress must be a JSON value (a number, a str, a small dict...): got a "
            f"{type(value).__name__} ({_why(exc)})"
        ) from None
    if len(text.encode()) > PROGRESS_LIMIT:
        raise ProgressError(
            f"progress is {len(text.encode())} bytes as JSON, over the {PROGRESS_LIMIT}-byte "
            "limit: report a summary (a count, a fraction, a short message)"
        )
    return text


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deep"
    return str(exc).split("\n", 1)[0][:200]
