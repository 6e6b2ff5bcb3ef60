"""The task registry: names for module-level functions, so jobs can be stored as a name
plus JSON arguments (never pickled code).

    @task("billing.send_invoice")      # @task and @task() use "module.qualname"
    def send_invoice(customer: str) -> None: ...
"""

from __future__ import annotations

import difflib
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar, overload

from scheduler import validation
from scheduler.errors import TaskNotRegisteredError
from scheduler.model import Target, TaskRef

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_tasks: dict[str, Callable[..., Any]] = {}
_generation = 0  # grows with every registration: calls resolved before it are stale

CALLS_CACHE = 4096  # distinct (task, arguments) whose call is kept ready (then cleared)
_SCALARS = frozenset({str, int, float, bool, type(None)})
# (name, args_json) -> (generation, call); read and written without the lock: a dict
# operation is atomic under the GIL, and a race only builds the same call twice
_calls: dict[tuple[str, str], tuple[int, Callable[[], Any]]] = {}


@overload
def task(name: F) -> F: ...
@overload
def task(name: str | None = None) -> Callable[[F], F]: ...
def task(name: str | F | None = None, **options: Any) -> F | Callable[[F], F]:
    """Register a function under ``name`` (default ``module.qualname``): ``@task("name")``,
    ``@task()`` or bare ``@task``. Returns the function itself, registered. A job's
    options (retry, timeout, lane, ...) are given when it is scheduled, not here."""
    if options:  # @task(retry=3), as Celery's and Dramatiq's decorators take it
        raise TypeError(
            f"@task takes only a name, not {', '.join(map(repr, options))}: a job's options "
            "(retry, timeout, lane, misfire, overlap, delivery) are given when it is "
            "scheduled, e.g. enqueue(fn, retry=RetryPolicy(max_attempts=3), timeout=30)"
        )
    if callable(name):  # bare @task: it was given the function (it used to return
        return task(None)(name)  # the decorator, so the function was silently replaced)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"task name must be a string, got {type(name).__name__}: {name!r}")

    def register(fn: F) -> F:
        global _generation
        validation.callable_job(fn, "a task")
        validation.runnable(fn, "a task")
        key = validation.name(name or default_name(fn), "task name")
        with _lock:
            old = _tasks.get(key)
            if old is not None and old is not fn and default_name(old) != default_name(fn):
                raise ValueError(
                    f"task name {key!r} is already registered to "
                    f"{default_name(old)}; pick another name"
                )
            _tasks[key] = fn
            _generation += 1
        fn.__duetime_task__ = key  # type: ignore[attr-defined]
        return fn

    return register


def default_name(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def name_of(fn: Callable[..., Any]) -> str | None:
    """The registered name of ``fn``, or None if it is not a registered task."""
    key = getattr(fn, "__duetime_task__", None)
    with _lock:
        return key if key is not None and _tasks.get(key) is fn else None


def lookup(name: str) -> Callable[..., Any]:
    with _lock:
        fn = _tasks.get(name)
    if fn is None:
        raise TaskNotRegisteredError(
            f"no task named {name!r} is registered in this process; decorate the function "
            "with @scheduler.task(...) and import its module in every replica (--import)"
        )
    return fn


def names() -> list[str]:
    """The names of every registered task, sorted."""
    return sorted(_tasks)


_served: tuple[int, list[str]] = (0, [])


def served() -> tuple[int, list[str]]:
    """(a number that grows with every registration, the registered names, sorted): what
    a replica serves, read on every claim (cheap: the names are sorted once per change)."""
    global _served
    if _served[0] != _generation:
        with _lock:
            _served = (_generation, sorted(_tasks))
    return _served


def registered(name: str) -> Callable[..., Any] | None:
    """The function registered as ``name`` in this process, or None."""
    return _tasks.get(name)


# function -> (the names it takes by keyword, None: any; the names it requires)
_shapes: dict[Callable[..., Any], tuple[frozenset[str] | None, frozenset[str]]] = {}


def check_arguments(fn: Callable[..., Any], name: str, kwargs: dict[str, Any]) -> None:
    """Raise ``TypeError`` if the task would refuse ``kwargs`` (a misspelt or missing
    argument), at enqueue time rather than as a failure on a replica. Only names are
    checked, against the signature read once per function; a callable without a
    signature passes."""
    takes, needs = _shape_of(fn)
    if (takes is None or kwargs.keys() <= takes) and needs <= kwargs.keys():
        return
    signature = inspect.signature(fn)
    try:
        signature.bind(**kwargs)
        why = "it cannot take them by name"  # positional-only parameters, say
    except TypeError as exc:
        why = str(exc) + _did_you_mean(signature, kwargs)
    raise TypeError(
        f"the arguments do not fit task {name!r} {signature}: {why} (kwargs are passed by name)"
    )


def check_no_arguments(fn: Callable[..., Any]) -> None:
    """Raise ``TypeError`` if ``fn``, which a job calls with no arguments, requires some
    (it was accepted, and failed at its time with "missing 1 required positional
    argument")."""
    needs = _shape_of(fn)[1]
    if needs:
        what = getattr(fn, "__qualname__", type(fn).__qualname__)
        raise TypeError(
            f"{what}{inspect.signature(fn)} requires {', '.join(sorted(needs))}, but a job "
            "is called with no arguments: bind them (functools.partial, a lambda), or "
            "register it with @task and give kwargs="
        )


def _shape_of(fn: Callable[..., Any]) -> tuple[frozenset[str] | None, frozenset[str]]:
    shape = _shapes.get(fn)
    if shape is None:
        if len(_shapes) >= CALLS_CACHE:
            _shapes.clear()
        shape = _shapes[fn] = _shape(fn)
    return shape


def _shape(fn: Callable[..., Any]) -> tuple[frozenset[str] | None, frozenset[str]]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature (some builtins): the replica will tell
        return None, frozenset()
    by_name = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    takes = frozenset(p.name for p in params if p.kind in by_name)
    anything = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    needs = frozenset(
        p.name
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    )
    return (None if anything else takes), needs


def _did_you_mean(signature: inspect.Signature, kwargs: dict[str, Any]) -> str:
    """A hint (\"; did you mean 'name' for 'nme'?\") for each argument name close to a
    parameter it does not name; "" if there is none."""
    params = list(signature.parameters)
    hints = [
        f"{close[0]!r} for {given!r}"
        for given in kwargs
        if given not in params and (close := difflib.get_close_matches(given, params, 1))
    ]
    return f"; did you mean {', '.join(hints)}?" if hints else ""


def resolve(target: Target) -> Callable[[], Any]:
    """What a worker calls: the callable itself, or the registered task with its args.

    The call of a task whose arguments are all JSON scalars (immutable) is built once per
    distinct (name, arguments) and reused until a task is registered again (a burst of
    jobs of one definition parses its arguments once). Arguments that hold a list or an
    object are parsed afresh for each call, so a job that mutates them cannot change what
    the next invocation receives."""
    if not isinstance(target, TaskRef):
        return target
    key = (target.name, target.args_json)
    cached = _calls.get(key)
    if cached is not None and cached[0] == _generation:
        return cached[1]
    generation = _generation  # before the lookup: a registration meanwhile makes it stale
    fn = lookup(target.name)
    kwargs = validation.loads(target.args_json)  # ValueError if it is not JSON
    if not isinstance(kwargs, dict):
        raise TypeError(f"the arguments are a JSON {type(kwargs).__name__}, not an object")
    call = functools.partial(fn, **kwargs)  # a partial: an async task stays recognisable
    if all(type(v) in _SCALARS for v in kwargs.values()):
        if len(_calls) >= CALLS_CACHE:
            _calls.clear()
        _calls[key] = (generation, call)
    return call
