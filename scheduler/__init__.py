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
        JobNotFoundError,
        PayloadError,
        SchedulerClosedError,
        TaskNotRegisteredError,
    )
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
    "JobNotFoundError": "scheduler.errors",
    "PayloadError": "scheduler.errors",
    "SchedulerClosedError": "scheduler.errors",
    "TaskNotRegisteredError": "scheduler.errors",
    "Ambiguous": "scheduler.model",
    "Cron": "scheduler.model",
    "Delivery": "scheduler.model",
    "JobInfo": "scheduler.model",
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
    "Ambiguous", "AsyncClient", "Client", "ClientClosedError", "Clock", "Cron",
    "current_invocation", "Delivery", "DuetimeError", "InvocationContext",
    "InvocationTimeout", "JobInfo", "JobNotFoundError", "JobScheduler", "MemoryStore",
    "Misfire", "Missing", "MonotonicClock", "Overlap", "PayloadError", "RecurringJobScheduler",
    "RedisStore", "RetryPolicy", "Scheduler", "SchedulerClosedError", "task",
    "TaskNotRegisteredError",
]  # fmt: skip
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'scheduler' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
