"""duetime: a job scheduler that runs each job at its time, once.

    from scheduler import JobScheduler
    with JobScheduler(num_workers=4) as s:
        s.schedule(lambda: print("hi"), delay_seconds=1.5)

The public names below resolve on first use (PEP 562), so importing one module of the
package (``scheduler.clock``, ``workers.timers``...) loads that module and what it
imports, not the engine, the stores and the worker pool.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.api import JobScheduler, RecurringJobScheduler
    from scheduler.async_client import AsyncClient
    from scheduler.client import Client
    from scheduler.clock import Clock, MonotonicClock
    from scheduler.engine import Scheduler
    from scheduler.errors import (
        ClientClosedError,
        DuetimeError,
        InvocationTimeout,
        JobFailed,
        JobNotFoundError,
        PayloadError,
        ResultTimeoutError,
        SchedulerClosedError,
        TaskNotRegisteredError,
    )
    from scheduler.handles import AsyncJobHandle, JobHandle
    from scheduler.lane import Lane
    from scheduler.model import (
        Ambiguous,
        Cron,
        Delivery,
        JobInfo,
        Misfire,
        Missing,
        Overlap,
        RetryPolicy,
    )
    from scheduler.stores.memory import MemoryStore
    from scheduler.stores.redis import RedisStore
    from scheduler.tasks import task
    from workers.context import InvocationContext, current_invocation

#: public name -> the module that defines it
_HOMES = {
    "JobScheduler": "scheduler.api",
    "RecurringJobScheduler": "scheduler.api",
    "AsyncClient": "scheduler.async_client",
    "Client": "scheduler.client",
    "Clock": "scheduler.clock",
    "MonotonicClock": "scheduler.clock",
    "Scheduler": "scheduler.engine",
    "ClientClosedError": "scheduler.errors",
    "DuetimeError": "scheduler.errors",
    "InvocationTimeout": "scheduler.errors",
    "JobFailed": "scheduler.errors",
    "JobNotFoundError": "scheduler.errors",
    "PayloadError": "scheduler.errors",
    "ResultTimeoutError": "scheduler.errors",
    "AsyncJobHandle": "scheduler.handles",
    "JobHandle": "scheduler.handles",
    "SchedulerClosedError": "scheduler.errors",
    "TaskNotRegisteredError": "scheduler.errors",
    "Ambiguous": "scheduler.model",
    "Cron": "scheduler.model",
    "Delivery": "scheduler.model",
    "JobInfo": "scheduler.model",
    "Lane": "scheduler.lane",
    "Misfire": "scheduler.model",
    "Missing": "scheduler.model",
    "Overlap": "scheduler.model",
    "RetryPolicy": "scheduler.model",
    "MemoryStore": "scheduler.stores.memory",
    "RedisStore": "scheduler.stores.redis",
    "task": "scheduler.tasks",
    "InvocationContext": "workers.context",
    "current_invocation": "workers.context",
}

__all__ = [
    "Ambiguous", "AsyncClient", "AsyncJobHandle", "Client", "ClientClosedError", "Clock", "Cron",
    "current_invocation", "Delivery", "DuetimeError", "InvocationContext",
    "InvocationTimeout", "JobFailed", "JobHandle", "JobInfo", "JobNotFoundError",
    "JobScheduler", "Lane", "MemoryStore", "Misfire", "Missing", "MonotonicClock", "Overlap",
    "PayloadError", "RecurringJobScheduler", "RedisStore", "ResultTimeoutError",
    "RetryPolicy", "Scheduler", "SchedulerClosedError", "task", "TaskNotRegisteredError",
]  # fmt: skip
__version__ = "0.1.0"


def _check_workers() -> None:
    """duetime ships two top-level packages, ``scheduler`` and ``workers`` (running user
    code). A package or module named ``workers`` found first on ``sys.path`` (a project's
    own, in the working directory) hides duetime's: say so here, in one line, not as a
    ModuleNotFoundError deep inside a later import. ~0.1 ms."""
    import importlib.util
    import os

    ours = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workers")
    if not os.path.isdir(ours):  # not laid out as files (a zip): nothing to compare
        return
    try:
        spec = importlib.util.find_spec("workers")
    except (ImportError, ValueError):
        spec = None
    found = list(spec.submodule_search_locations or []) if spec is not None else []
    if any(os.path.realpath(p) == os.path.realpath(ours) for p in found):
        return
    hidden_by = found[0] if found else (spec.origin if spec is not None else None)
    raise ImportError(
        f"duetime's package 'workers' ({ours}) is hidden by {hidden_by or 'another module'}, "
        "found first on sys.path: duetime's import names are 'scheduler' and 'workers', so a "
        "project's own 'workers' package or module clashes with it; rename yours, or run "
        "from a directory where it is not importable first",
        name="workers",
    )


_check_workers()


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'scheduler' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
