"""The two facades of SPEC §3: thin layers over one ``Scheduler`` engine.

Both are context managers (exit = ``shutdown()``) and thread-safe; their methods may be
called from inside running jobs. ``.engine`` reaches the richer API (lanes, timeouts,
retries, pause/resume, inspection).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scheduler import validation
from scheduler.clock import Clock
from scheduler.engine import Scheduler
from scheduler.model import Cron
from scheduler.stores.base import Store


class _Facade:
    def __init__(
        self, num_workers: int, *, store: Store | None = None, clock: Clock | None = None
    ) -> None:
        self.engine = Scheduler(num_workers, store=store, clock=clock)

    def shutdown(self, wait: bool = True) -> None:
        """Stop starting jobs; with ``wait``, return once running jobs have finished.
        Idempotent, and safe to call from inside a job. Pending jobs are not run."""
        self.engine.shutdown(wait)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class JobScheduler(_Facade):
    """One-off delayed jobs on ``num_workers`` threads."""

    def schedule(self, job: Callable[[], None], delay_seconds: float) -> int:
        """Run ``job`` once, ``delay_seconds`` from now (0 = as soon as a worker is free).

        Returns the job id once the job is in the store; from then on ``cancel`` can stop
        it. Never runs before its due time; jobs due at the same instant start in the
        order they were scheduled. Raises ``TypeError``/``ValueError`` on bad input (and
        then nothing was scheduled), ``SchedulerClosedError`` after ``shutdown``."""
        validation.callable_job(job)
        delay = validation.delay(delay_seconds)
        job_id = self.engine.next_id()
        self.engine.after(job, delay, job_id=str(job_id))
        return job_id

    def cancel(self, job_id: int) -> bool:
        """Cancel a scheduled job. True iff it had not started yet (and now never will);
        False if it already started, finished, was cancelled, or never existed."""
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise TypeError(f"job_id must be the int that schedule() returned, got {job_id!r}")
        if job_id < 1:
            return False
        return self.engine.cancel(str(job_id))


class RecurringJobScheduler(_Facade):
    """Fixed-rate recurring jobs: run k of a job is due at anchor + k*interval, anchor =
    the time of ``schedule``; lateness or long runs never shift later runs (no drift)."""

    def schedule(self, job_id: str, fn: Callable[[], None], interval_seconds: float) -> None:
        """Schedule ``fn`` every ``interval_seconds``, first run one interval from now.

        Upsert: the same ``fn`` and interval for an existing ``job_id`` is a no-op that
        keeps the anchor; a different one replaces the job atomically (its pending
        occurrence never runs; a running invocation may finish). An occurrence due while
        the previous one still runs is skipped and recorded (see ``engine.get``)."""
        validation.job_id(job_id)
        validation.callable_job(fn, "fn")
        self.engine.every(fn, validation.interval(interval_seconds), job_id=job_id)

    def schedule_cron(
        self, job_id: str, fn: Callable[[], None], cron: str | Cron, tz: str | None = None
    ) -> None:
        """Schedule ``fn`` by the calendar: a cron expression (5 fields, or 6 with seconds
        first) read in the IANA zone ``tz`` (default UTC), or a ``Cron`` with its
        daylight-saving policy and jitter. Upsert, overlap and drift as for ``schedule``."""
        validation.job_id(job_id)
        validation.callable_job(fn, "fn")
        self.engine.cron(fn, cron, tz=tz, job_id=job_id)

    def deschedule(self, job_id: str) -> bool:
        """Remove the job. True iff a future run was prevented. A running invocation is
        not interrupted."""
        return self.engine.cancel(job_id)
