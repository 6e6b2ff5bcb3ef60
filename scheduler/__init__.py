"""duetime: a job scheduler that runs each job at its time, once.

from scheduler import JobScheduler
with JobScheduler(num_workers=4) as s:
    s.schedule(lambda: print("hi"), delay_seconds=1.5)
"""

from scheduler.api import JobScheduler, RecurringJobScheduler
from scheduler.client import Client
from scheduler.clock import Clock, MonotonicClock
from scheduler.engine import Scheduler
from scheduler.errors import (
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

__all__ = [
    "Ambiguous",
    "Client",
    "Clock",
    "Cron",
    "current_invocation",
    "Delivery",
    "DuetimeError",
    "InvocationContext",
    "InvocationTimeout",
    "JobInfo",
    "JobNotFoundError",
    "JobScheduler",
    "MemoryStore",
    "Misfire",
    "Missing",
    "MonotonicClock",
    "Overlap",
    "PayloadError",
    "RecurringJobScheduler",
    "RedisStore",
    "RetryPolicy",
    "Scheduler",
    "SchedulerClosedError",
    "task",
    "TaskNotRegisteredError",
]
__version__ = "0.1.0"
