"""The two facades (docs/facades.md): thin layers over one ``Scheduler`` engine.

Both are context managers (exit = ``shutdown()``) and thread-safe; their methods may be
called from inside running jobs. Beyond their fixed signatures, keyword-only:
``lanes`` (name -> worker count, or a ``Lane``: ``Lane(2, "process")`` runs that lane's
jobs in worker processes, docs/lanes.md; a job's ``lane=`` picks one, so long jobs in
their own lane cannot starve short ones), ``lane_timeouts``, and ``stats()``, the read-out of
dispatch delay and of what waits per lane. ``.engine`` reaches the richer API (timeouts,
retries, pause/resume, inspection).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scheduler import readout, validation
from scheduler.clock import Clock
from scheduler.engine import Scheduler
from scheduler.lane import Lane
from scheduler.model import Cron
from scheduler.readout import LagWindow, Stats
from scheduler.stores.base import QueueDepths, Store


class _Facade:
    def __init__(
        self,
        num_workers: int,
        *,
        store: Store | None = None,
        clock: Clock | None = None,
        lanes: Mapping[str, int | Lane] | None = None,
        lane_timeouts: Mapping[str, float | str] | None = None,
    ) -> None:
        self._lags = LagWindow()
        self.engine = Scheduler(
            num_workers,
            store=store,
            clock=clock,
            lanes=lanes,
            lane_timeouts=lane_timeouts,
            metrics=self._lags,
        )

    def stats(self) -> Stats:
        """Dispatch delay and what waits, now: ``lag`` (seconds from when each of the
        recent claims became claimable to its claim: p50, p90, p99, max) over every lane,
        and per lane its workers, busy workers, queued and already-due invocations and
        its own lag. A lag that grows while a lane's ``due`` stays above zero means that
        lane needs more workers (or its long jobs a lane of their own)."""
        store = self.engine.store
        depths = store.queue_depths() if isinstance(store, QueueDepths) else {}
        return readout.build(
            self._lags.recent(), self.engine.lane_load(), depths, self.engine.loop_lag()
        )

    def shutdown(self, wait: bool = True) -> None:
        """Stop starting jobs; with ``wait``, return once running jobs have finished.
        Idempotent, and safe to call from inside a job. Pending jobs are not run."""
        self.engine.shutdown(wait)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class JobScheduler(_Facade):
    """One-off delayed jobs on ``num_workers`` threads (the ``"default"`` lane), plus
    ``lanes={"slow": 2}`` for named lanes with their own workers (and ``lane_timeouts``,
    seconds per lane). ``stats()`` reads out the dispatch delay."""

    def schedule(
        self, job: Callable[[], None], delay_seconds: float | str, *, lane: str = "default"
    ) -> int:
        """Run ``job`` once, ``delay_seconds`` from now (0 = as soon as a worker is free;
        a duration string such as ``"90s"`` or ``"PT1M"`` works too), on the workers of
        ``lane``.

        Returns the job id once the job is in the store; from then on ``cancel`` can stop
        it. Never runs before its due time; jobs due at the same instant start in the
        order they were scheduled. Raises ``TypeError``/``ValueError`` on bad input (an
        unknown lane too; then nothing was scheduled), ``SchedulerClosedError`` after
        ``shutdown``."""
        validation.callable_job(job)
        delay = validation.delay(delay_seconds)
        job_id = self.engine.next_id()
        self.engine.after(job, delay, job_id=str(job_id), lane=lane)
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
    the time of ``schedule``; lateness or long runs never shift later runs (no drift).
    ``lanes``, ``lane_timeouts`` and ``stats()`` as for ``JobScheduler``."""

    def schedule(
        self,
        job_id: str,
        fn: Callable[[], None],
        interval_seconds: float | str,
        *,
        lane: str = "default",
    ) -> None:
        """Schedule ``fn`` every ``interval_seconds`` (or a duration string: ``"5m"``,
        ``"PT1H"``), first run one interval from now, on the workers of ``lane``.

        Upsert: the same ``fn``, interval and lane for an existing ``job_id`` is a no-op
        that keeps the anchor; a different one replaces the job atomically (its pending
        occurrence never runs; a running invocation may finish). An occurrence due while
        the previous one still runs is skipped and recorded (see ``engine.get``)."""
        validation.job_id(job_id)
        validation.callable_job(fn, "fn")
        self.engine.every(fn, validation.recurrence(interval_seconds), job_id=job_id, lane=lane)

    def schedule_cron(
        self,
        job_id: str,
        fn: Callable[[], None],
        cron: str | Cron,
        tz: str | None = None,
        *,
        lane: str = "default",
    ) -> None:
        """Schedule ``fn`` by the calendar: a cron expression (5 fields, or 6 with seconds
        first) read in the IANA zone ``tz`` (default UTC), or a ``Cron`` with its
        daylight-saving policy and jitter. Upsert, overlap, drift and ``lane`` as for
        ``schedule``."""
        validation.job_id(job_id)
        validation.callable_job(fn, "fn")
        self.engine.cron(fn, cron, tz=tz, job_id=job_id, lane=lane)

    def deschedule(self, job_id: str) -> bool:
        """Remove the job. True iff a future run was prevented. A running invocation is
        not interrupted."""
        return self.engine.cancel(job_id)
