"""The batched hand-off (workers/pool.py), the lazily armed ack timer (workers/acks.py)
and the rule that the timer thread never calls the store (workers/timers.py)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from scheduler.engine import Scheduler
from scheduler.model import Claim, Commit
from scheduler.stores.memory import MemoryStore
from scheduler.testing import FakeClock
from tests.helpers import WAIT
from tests.unit.test_batching import Store, claim
from workers.acks import Acks
from workers.pool import MAX_AHEAD, PoolFullError, WorkerPool
from workers.timers import Timers


def test_a_batch_is_started_in_order_and_queued_all_or_none():
    gate, order = threading.Event(), []

    def run(n: int) -> None:
        if n == 0:
            gate.wait(WAIT)
        order.append(n)

    pool: WorkerPool[int] = WorkerPool("p", 1, run, lookahead=0.01)
    pool.submit(0)  # holds the one worker while the batch is queued behind it
    pool.submit_many(list(range(1, 1 + MAX_AHEAD)))
    with pytest.raises(PoolFullError):
        pool.submit_many([-1, -2])  # past the cap: nothing of it is queued
    gate.set()
    assert pool.wait_idle(WAIT)
    assert order == list(range(1 + MAX_AHEAD))
    pool.close()
    assert pool.join(WAIT)


def test_a_wake_up_is_sent_only_to_a_worker_still_asleep():
    """A worker woken but not yet running is not woken again: each pop used to call
    notify() while woken workers were still on their way (~one no-op notify per item)."""
    pool: WorkerPool[int] = WorkerPool("p", 4, lambda n: None, lookahead=0.01)
    ready = pool._ready
    wasted = []
    notify = ready.notify

    def counted(n: int = 1) -> None:
        if not ready._waiters:  # type: ignore[attr-defined]
            wasted.append(1)
        notify(n)

    ready.notify = counted  # type: ignore[method-assign]
    for _ in range(20):
        pool.submit_many(list(range(MAX_AHEAD)))
        assert pool.wait_idle(WAIT)
    assert wasted == []
    pool.close()
    assert pool.join(WAIT)


def test_one_batch_reaches_every_idle_worker():
    """One wake-up per batch, passed on: every worker takes part while items remain."""
    names: set[str] = set()
    barrier = threading.Barrier(3, timeout=WAIT)

    def run(n: int) -> None:
        names.add(threading.current_thread().name)
        if n < 3:
            barrier.wait()  # only returns once three workers run at once

    pool: WorkerPool[int] = WorkerPool("p", 3, run)
    pool.submit_many([0, 1, 2])
    assert pool.wait_idle(WAIT)
    assert len(names) == 3
    pool.close()
    assert pool.join(WAIT)


def test_on_drained_runs_whenever_a_worker_finds_the_queue_empty():
    gate, drained = threading.Event(), threading.Event()
    pool: WorkerPool[int] = WorkerPool(
        "p", 2, lambda n: gate.wait(WAIT) if n == 0 else None, on_drained=drained.set
    )
    pool.submit(0)  # a long item on one worker: the pool is not idle
    pool.submit(1)
    assert drained.wait(WAIT)  # the other worker drained the queue: flushed anyway
    gate.set()
    assert pool.wait_idle(WAIT)
    pool.close()
    assert pool.join(WAIT)


def test_a_lazily_armed_ack_timer_waits_for_a_job_to_start():
    clock = FakeClock()
    timers = Timers(clock)
    try:
        store = Store()
        acks = Acks(store.complete_many, timers, max_delay=0.002, arm_on_add=False)
        acks.add(claim(1), None)
        clock.advance(1.0)
        timers.call_later(0.0, lambda: None)  # the timer thread has run what was due
        assert not store.flushed.wait(0.05) and acks.pending() == 1  # nothing armed
        acks.starting()  # a job starts while a success waits: its deadline is armed
        clock.advance(0.002)
        assert store.flushed.wait(WAIT)
        assert store.batches == [["j1"]]
    finally:
        timers.close()


class ThreadRecordingStore(MemoryStore):
    """Records the name of every thread that calls a writing method."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.callers: set[str] = set()

    def _note(self) -> None:
        self.callers.add(threading.current_thread().name)

    def renew(self, claims: Sequence[Claim], lease: float) -> list[Commit]:
        self._note()
        return super().renew(claims, lease)

    def complete_many(self, done: Sequence[tuple[Claim, Any]]) -> list[Commit]:
        self._note()
        return super().complete_many(done)

    def fail(self, claim: Claim, error: str, retry_in: float | None, traceback: str = "") -> Commit:
        self._note()
        return super().fail(claim, error, retry_in, traceback)


def test_no_store_call_runs_on_the_timer_thread():
    """Heartbeats, ack deadlines and job timeouts all fire on the timer thread; their
    store calls run elsewhere, so a slow store cannot starve the other timers."""
    clock = FakeClock()
    store = ThreadRecordingStore(clock)
    eng = Scheduler(2, store=store, clock=clock, lease=3.0)
    try:
        release, started = threading.Event(), threading.Event()

        def held() -> None:
            started.set()
            release.wait(WAIT)

        eng.after(held, 0, job_id="held", timeout=30)
        eng.after(lambda: None, 0, job_id="quick")
        assert started.wait(WAIT)
        for _ in range(4):  # heartbeats (every lease/3) and the quick job's ack deadline
            clock.advance(1.0)
            assert eng.wait_idle(0.05) is False  # "held" still runs
        release.set()
        assert eng.wait_idle(WAIT)
        assert eng.get("quick").runs == 1 and eng.get("held").runs == 1
        assert "duetime-heartbeat" in store.callers  # the renewals did happen...
        assert "duetime-timers" not in store.callers  # ...never on the timer thread
    finally:
        eng.shutdown()


def test_cancel_takes_back_a_job_claimed_ahead_that_has_not_started(make_engine, clock):
    """Claimed ahead of the workers (look-ahead) but not started: cancel returns True,
    and it never starts (docs/guarantees.md: after cancel returns, no new invocation starts)."""
    eng = make_engine(num_workers=1)
    ran: list[str] = []
    eng.after(lambda: ran.append("warm"), 0, job_id="warm")  # the lane learns its pace
    assert eng.wait_idle(WAIT) and ran == ["warm"]
    gate, started = threading.Event(), threading.Event()

    def held() -> None:
        started.set()
        gate.wait(WAIT)

    eng.after(held, 0, job_id="held")
    assert started.wait(WAIT)
    eng.after(lambda: ran.append("late"), 0, job_id="late")
    deadline = threading.Event()
    for _ in range(500):  # until the dispatcher has claimed it into the lane's queue
        if eng.lane_load()["default"][1] == 2:
            break
        deadline.wait(0.01)
    assert eng.lane_load()["default"][1] == 2
    assert eng.cancel("late") is True
    gate.set()
    assert eng.wait_idle(WAIT)
    assert ran == ["warm"] and eng.get("late").state == "cancelled"
