"""MemoryStore's read side: snapshots, the event log, queue depths, what waits on each
limit and what holds a job (``scheduler/limit_usage.py``), and wake-up listeners.

A mixin of ``MemoryStore`` (its state is declared here, set by ``MemoryStore.__init__``);
each method holds the store's one lock once, so each reads one consistent state.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from scheduler import limit_usage
from scheduler.clock import Clock
from scheduler.errors import JobNotFoundError
from scheduler.flow import FlowState, Limit, ms_up, now_ms
from scheduler.limit_usage import TOP_KEYS, Hold, ScopeUsage
from scheduler.model import Event, JobInfo
from scheduler.stores.base import WakeListener
from scheduler.stores.memory.flow import FlowBook
from scheduler.stores.memory.records import JobRecord, Running, job_info, lane_depths


class MemoryViews:
    clock: Clock
    _lock: threading.Lock
    _jobs: dict[str, JobRecord]
    _running: dict[str, Running]
    _running_per_job: dict[str, int]
    _history: OrderedDict[str, JobRecord]
    _events: deque[tuple[Any, ...]]  # Event fields, in order
    _listeners: tuple[WakeListener, ...]
    _flow: FlowBook

    def get(self, job_id: str) -> JobInfo | None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                done = self._history.get(job_id)
                return None if done is None else job_info(done, [])
            return self._info_locked(job)

    def jobs(self) -> list[JobInfo]:
        with self._lock:
            infos = [self._info_locked(j) for j in self._jobs.values()]
        return sorted(infos, key=lambda i: (i.next_run is None, i.next_run or 0.0))

    def limits(self) -> dict[str, Limit]:
        """Every declared limit, by scope (``FlowLimits``)."""
        with self._lock:
            return dict(self._flow.limits)

    def flow_of(self, key: str) -> FlowState:
        """Where limit key ``key`` stands (``FlowLimits``)."""
        with self._lock:
            return self._flow.state(key, now_ms(self.clock.now()))

    def limit_usage(self, top: int = TOP_KEYS) -> list[ScopeUsage]:
        """What waits on each declared limit now (``FlowLimits``; docs/flow-control.md):
        one read of the jobs under the lock (O(jobs), as ``queue_depths``)."""
        with self._lock:
            now = now_ms(self.clock.now())
            if not self._flow.limits:
                return []
            due: dict[str, list[int]] = {}
            for job in self._jobs.values():
                key = job.spec.limit_key
                if key is not None and job.pending:
                    dues = [t for t in (ms_up(p.due) for p in job.pending.values()) if t <= now]
                    if dues:
                        due.setdefault(key, []).extend(dues)
            return limit_usage.usage(self._flow.limits, self._flow.seen(due), now, top)

    def hold_of(self, job_id: str) -> Hold | None:
        """What holds ``job_id`` back now: its key's limit, if it is due and that limit is
        full (``FlowLimits``); None if not. ``JobNotFoundError`` for an unknown job."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                if job_id in self._history:
                    return None
                raise JobNotFoundError(job_id)
            key = job.spec.limit_key
            if key is None:
                return None
            now = now_ms(self.clock.now())
            return limit_usage.hold(self._info_locked(job), self._flow.state(key, now), now)

    def events(self, limit: int = 100) -> list[Event]:
        with self._lock:
            recent = list(self._events)[-limit:] if limit > 0 else []
        return [Event._make(e) for e in recent]

    def queue_depths(self) -> dict[str, tuple[int, int]]:
        """Per lane: pending invocations, and how many are due now (``QueueDepths``)."""
        with self._lock:
            return lane_depths(self._jobs.values(), self.clock.now())

    def subscribe(self, listener: WakeListener) -> Callable[[], None]:
        with self._lock:  # copy on write: _wake reads the tuple without the lock
            self._listeners = (*self._listeners, listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    i = self._listeners.index(listener)
                    self._listeners = self._listeners[:i] + self._listeners[i + 1 :]

        return unsubscribe

    def _info_locked(self, job: JobRecord) -> JobInfo:
        jid = job.spec.job_id
        running = (
            [r for r in self._running.values() if r.job_id == jid]
            if self._running_per_job.get(jid)
            else []
        )
        return job_info(job, running)

    def _wake(self, due_in: float | None) -> None:
        for listener in self._listeners:  # a tuple, replaced whole by (un)subscribe
            listener(due_in)
