"""The task registry: names for module-level functions, so jobs can be stored as a name
plus JSON arguments (never pickled code).

    @task("billing.send_invoice")      # @task() alone uses "module.qualname"
    def send_invoice(customer: str) -> None: ...
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from scheduler import validation
from scheduler.errors import TaskNotRegisteredError
from scheduler.model import Target, TaskRef

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_tasks: dict[str, Callable[..., Any]] = {}


def task(name: str | None = None) -> Callable[[F], F]:
    """Register a function under ``name`` (default ``module.qualname``)."""

    def register(fn: F) -> F:
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


def resolve(target: Target) -> Callable[[], Any]:
    """What a worker calls: the callable itself, or the registered task with its args."""
    if not isinstance(target, TaskRef):
        return target
    fn = lookup(target.name)
    kwargs = json.loads(target.args_json)  # ValueError if it is not JSON
    if not isinstance(kwargs, dict):
        raise TypeError(f"the arguments are a JSON {type(kwargs).__name__}, not an object")
    return functools.partial(fn, **kwargs)  # a partial: an async task stays recognisable
