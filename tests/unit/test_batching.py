"""Batched acknowledgements (workers/acks.py) and the pool's look-ahead (workers/pool.py),
without Redis: a fake ``complete_many`` and real threads synchronised by events."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from scheduler.model import After, Claim, Commit, JobSpec
from scheduler.testing import FakeClock
from tests.helpers import WAIT, noop
from workers import commits
from workers.acks import Acks
from workers.pool import MAX_AHEAD, PoolFullError, WorkerPool
from workers.timers import Timers


def claim(n: int) -> Claim:
    return Claim(
        job_id=f"j{n}",
        scheduled=0.0,
        attempt=1,
        token=f"o:{n}",
        fence=n,
        lease_until=30.0,
        spec=JobSpec(f"j{n}", noop, After(0)),
        generation=1,
        lane="default",
    )


class Store:
    """Records every batch; answers LEASE_LOST for the tokens in ``lost``."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.lost: set[str] = set()
        self.flushed = threading.Event()

    def complete_many(self, done: Sequence[tuple[Claim, Any]]) -> list[Commit]:
        self.batches.append([c.job_id for c, _ in done])
        self.flushed.set()
        return [Commit.LEASE_LOST if c.token in self.lost else Commit.OK for c, _ in done]


@pytest.fixture
def timers():
    t = Timers(FakeClock())
    yield t
    t.close()


def test_acks_wait_for_a_flush_and_commit_in_one_call(timers):
    store = Store()
    acks = Acks(store.complete_many, timers)
    for n in range(3):
        acks.add(claim(n), None)
    assert store.batches == [] and acks.pending() == 3
    acks.flush()
    assert store.batches == [["j0", "j1", "j2"]] and acks.pending() == 0
    acks.flush()  # nothing queued: no call
    assert len(store.batches) == 1


def test_a_full_batch_is_flushed_at_once(timers):
    store = Store()
    acks = Acks(store.complete_many, timers, max_batch=4)
    for n in range(9):
        acks.add(claim(n), None)
    assert [len(b) for b in store.batches] == [4, 4] and acks.pending() == 1


def test_the_timer_flushes_a_batch_nobody_else_flushed():
    clock = FakeClock()
    timers = Timers(clock)
    try:
        store = Store()
        acks = Acks(store.complete_many, timers, max_delay=0.002)
        acks.add(claim(1), None)
        assert not store.flushed.is_set()
        clock.advance(0.002)
        assert store.flushed.wait(WAIT)
        assert store.batches == [["j1"]]
    finally:
        timers.close()


def test_a_slow_store_does_not_hold_up_the_timer_thread():
    """The timer only signals; the store call runs elsewhere, so heartbeats and timeouts
    on the same timer thread keep their times while an ack batch is in flight."""
    clock = FakeClock()
    timers = Timers(clock)
    release, entered, other = threading.Event(), threading.Event(), threading.Event()

    def slow(done: Sequence[tuple[Claim, Any]]) -> list[Commit]:
        entered.set()
        release.wait(WAIT)
        return [Commit.OK] * len(done)

    try:
        acks = Acks(slow, timers, max_delay=0.002)
        acks.add(claim(1), None)
        clock.advance(0.002)
        assert entered.wait(WAIT)  # the flush is blocked in the store ...
        timers.call_later(0.001, other.set)
        clock.advance(0.001)
        assert other.wait(WAIT)  # ... and another timer still fires
    finally:
        release.set()
        timers.close()


def test_refused_items_are_logged_and_a_store_failure_is_survived(timers, caplog, monkeypatch):
    monkeypatch.setattr(commits, "COMMIT_RETRY_PAUSES", (0.0, 0.0))
    store = Store()
    store.lost = {"o:1"}
    acks = Acks(store.complete_many, timers)
    acks.add(claim(0), None)
    acks.add(claim(1), None)
    with caplog.at_level(logging.WARNING, "duetime.workers"):
        acks.flush()
    assert "stale commit rejected for job j1" in caplog.text

    calls = []

    def broken(done: Sequence[tuple[Claim, Any]]) -> list[Commit]:
        calls.append(len(done))
        raise ConnectionError("down")

    acks = Acks(broken, timers)
    acks.add(claim(2), None)
    with caplog.at_level(logging.ERROR, "duetime.workers"):
        acks.flush()  # logged, not raised: the lease expires and the job runs again
    assert calls == [1, 1, 1]  # tried, then retried twice
    assert "recording the outcome of 1 invocation(s) failed" in caplog.text


# ---- look-ahead ---------------------------------------------------------------------------


def test_without_look_ahead_free_is_the_idle_workers():
    pool: WorkerPool[int] = WorkerPool("p", 2, lambda _: None)
    assert pool.free() == 2
    pool.close()
    assert pool.join(WAIT)


def test_quick_items_earn_look_ahead_and_slow_ones_none():
    ran = threading.Semaphore(0)

    def run(_: int) -> None:
        ran.release()

    pool: WorkerPool[int] = WorkerPool("p", 2, run, lookahead=0.5)
    assert pool.free() == 2  # no pace measured yet: only the workers
    pool.submit(1)
    assert ran.acquire(timeout=WAIT)
    assert pool.wait_idle(WAIT)
    assert pool.free() == 2 + MAX_AHEAD  # a no-op item: the cap
    pool.close()
    assert pool.join(WAIT)

    def slow(_: int) -> None:
        time.sleep(0.01)  # the item's own duration: 10x the look-ahead window

    slow_pool: WorkerPool[int] = WorkerPool("s", 2, slow, lookahead=0.001)
    slow_pool.submit(1)
    assert slow_pool.wait_idle(WAIT)
    assert slow_pool.free() == 2  # an item outlasts the window: no look-ahead
    slow_pool.close()
    assert slow_pool.join(WAIT)


def test_a_pool_with_look_ahead_queues_beyond_its_workers_but_is_bounded():
    gate = threading.Event()
    pool: WorkerPool[int] = WorkerPool("p", 1, lambda _: gate.wait(WAIT), lookahead=0.01)
    for n in range(1 + MAX_AHEAD):
        pool.submit(n)
    with pytest.raises(PoolFullError):
        pool.submit(-1)
    unstarted = pool.close()
    gate.set()
    assert len(unstarted) >= MAX_AHEAD  # handed back to the caller, as on shutdown
    assert pool.join(WAIT)


def test_on_idle_runs_before_the_worker_counts_as_free():
    flushed: list[int] = []
    pool: WorkerPool[int] = WorkerPool(
        "p", 1, lambda _: None, lookahead=0.01, on_idle=lambda: flushed.append(1)
    )
    pool.submit(1)
    assert pool.wait_idle(WAIT)
    assert flushed  # wait_idle returned, so on_idle (the ack flush) had run
    pool.close()
    assert pool.join(WAIT)
