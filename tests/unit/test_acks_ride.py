"""Successes riding with claims, without Redis: ``Acks.take``/``taken`` (workers/acks.py),
and the engine over a store that takes acks with a claim (``AcksWithClaims``), on the
fake clock, so no deadline timer ever fires: what is recorded was carried by a claim or
flushed by a lane going idle."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from scheduler import Scheduler
from scheduler.model import Claim, Commit
from scheduler.stores.base import AckedClaim, AcksWithClaims
from scheduler.stores.memory import MemoryStore
from scheduler.testing import FakeClock
from tests.helpers import WAIT, noop
from tests.unit.test_batching import Store, claim
from workers.acks import Acks
from workers.timers import Timers


class Riding:
    """A MemoryStore that takes acks with a claim (complete_many, then claim_due), and
    counts how successes travelled. ``lose``: the next N combined calls record nothing and
    answer None for the acks (a reply that never came); ``fail``: the next N claims
    fail after their acks were recorded."""

    def __init__(self, clock: FakeClock) -> None:
        self.inner = MemoryStore(clock)
        self.rode: list[int] = []
        self.alone: list[int] = []
        self.lose = self.fail = 0
        self.threads: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def complete_many(self, done: Sequence[tuple[Claim, Any]]) -> list[Commit]:
        self.alone.append(len(done))
        self.threads.add(threading.current_thread().name)
        return self.inner.complete_many(done)

    def complete_and_claim(
        self,
        done: Sequence[tuple[Claim, Any]],
        capacity: Mapping[str, int],
        lease: float | None,
        owner: str,
    ) -> AckedClaim:
        self.threads.add(threading.current_thread().name)
        if self.lose:
            self.lose -= 1
            return AckedClaim([None] * len(done), None, ConnectionError("reply lost"))
        self.rode.append(len(done))
        acks: list[Commit | None] = list(self.inner.complete_many(done))
        if self.fail:
            self.fail -= 1
            return AckedClaim(acks, None, RuntimeError("claim refused"))
        return AckedClaim(acks, self.inner.claim_due(capacity, lease, owner), None)


def test_take_cancels_the_deadline_and_taken_settles_or_puts_back(caplog):
    clock = FakeClock()
    timers = Timers(clock)
    try:
        store = Store()
        recorded: list[tuple[list[str], list[Commit] | None]] = []
        acks = Acks(
            store.complete_many,
            timers,
            max_delay=0.002,
            on_recorded=lambda cs, rs: recorded.append(
                ([c.job_id for c in cs], None if rs is None else list(rs))
            ),
        )
        for n in range(3):
            acks.add(claim(n), None)
        batch = acks.take()
        assert [c.job_id for c, _ in batch] == ["j0", "j1", "j2"] and acks.pending() == 0
        clock.advance(1.0)  # the deadline was cancelled: nothing is flushed on its own
        assert acks.take() == [] and store.batches == []
        with caplog.at_level(logging.WARNING, "duetime.workers"):
            acks.taken(batch, [Commit.OK, None, Commit.LEASE_LOST])
        assert recorded[0] == (["j0", "j2"], [Commit.OK, Commit.LEASE_LOST])
        assert "stale commit rejected for job j2" in caplog.text
        assert store.flushed.wait(WAIT)  # j1's outcome was not learned: the flusher sends it
        assert store.batches == [["j1"]]
        timers.close()  # joins nothing the flusher needs; its settle follows its call
        for _ in range(100):
            if len(recorded) == 2:
                break
            store.flushed.wait(0.01)
        assert recorded[1] == (["j1"], [Commit.OK])
    finally:
        timers.close()


@pytest.fixture
def riding(clock):
    store = Riding(clock)
    assert isinstance(store, AcksWithClaims)
    return store


def test_in_a_burst_successes_ride_and_wait_idle_implies_recorded(riding, clock):
    n = 500
    eng = Scheduler(2, store=riding, clock=clock)  # type: ignore[arg-type]
    try:
        ids = [eng.after(noop, 1) for _ in range(n)]
        assert eng.wait_idle(WAIT)
        clock.advance(1)  # all due at once
        assert eng.wait_idle(WAIT)  # no timer fired (fake clock): claims and idle flushes
        assert {eng.get(i).state for i in ids} == {"succeeded"}
        assert sum(riding.rode) + sum(riding.alone) == n
        assert sum(riding.rode) > n // 2, (riding.rode, riding.alone)
        assert "duetime-timers" not in riding.threads
        assert {eng.get(i).runs for i in ids} == {1}
    finally:
        eng.shutdown()


def test_outcomes_lost_with_the_claim_are_recorded_by_the_flusher(riding, clock):
    eng = Scheduler(1, store=riding, clock=clock, lookahead=0)  # type: ignore[arg-type]
    try:
        first = eng.after(noop, 0)
        assert eng.wait_idle(WAIT)
        riding.lose = 1  # the next claim's round trip fails: its acks' outcomes unknown
        eng.after(noop, 1)
        gate = threading.Event()
        eng.after(lambda: gate.wait(WAIT), 0)  # keeps the lane busy: no idle flush
        second = eng.after(noop, 0)
        clock.advance(1)
        gate.set()
        assert eng.wait_idle(WAIT)
        clock.advance(5)  # past the claim's back-off
        assert eng.wait_idle(WAIT)
        assert eng.get(first).state == "succeeded" and eng.get(second).state == "succeeded"
        assert {j.state for j in eng.jobs()} <= {"succeeded"}
    finally:
        eng.shutdown()


def test_a_failed_claim_still_settles_the_acks_it_carried(riding, clock, caplog):
    eng = Scheduler(1, store=riding, clock=clock, lookahead=0)  # type: ignore[arg-type]
    try:
        gate = threading.Event()
        eng.after(lambda: gate.wait(WAIT), 0)
        assert eng._dispatcher.wait_quiet(WAIT)
        done = eng.after(noop, 0)
        gate.set()
        assert eng.wait_idle(WAIT)
        riding.fail = 1
        eng.after(noop, 0)
        with caplog.at_level(logging.WARNING, "duetime.dispatcher"):
            clock.advance(5)
            assert eng.wait_idle(WAIT)
            clock.advance(5)
            assert eng.wait_idle(WAIT)
        assert eng.get(done).state == "succeeded"
        assert {j.state for j in eng.jobs()} <= {"succeeded"}
    finally:
        eng.shutdown()


def test_recorded_waits_for_a_batch_in_flight_with_a_claim():
    timers = Timers(FakeClock())
    store = Store()
    acks = Acks(store.complete_many, timers)
    acks.add(claim(1), None)
    batch = acks.take()  # on its way with a claim
    assert not acks.recorded(timeout=0.05)  # not settled yet
    acks.add(claim(2), None)
    request = threading.Timer(0.05, lambda: acks.taken(batch, [Commit.OK]))
    request.start()  # the claim's reply comes back
    try:
        assert acks.recorded(timeout=WAIT)
        assert store.batches == [["j2"]] and acks.pending() == 0  # j2 flushed by recorded()
    finally:
        request.join()
        timers.close()


def test_a_steady_trickle_claims_alone_and_records_beside(riding, clock):
    """Jobs due 1/64 s apart: each due job's claim goes alone (the deadline started its
    round: acks sent first would start it later), and the success waiting for it is
    recorded on the acks' thread meanwhile, not in front of the claim; none is lost."""
    step = 1 / 64
    eng = Scheduler(1, store=riding, clock=clock)  # type: ignore[arg-type]
    try:
        ids = [eng.after(noop, step * (k + 1)) for k in range(20)]
        assert eng._dispatcher.wait_quiet(WAIT)
        for _ in range(20):
            clock.advance(step)
            assert eng._dispatcher.wait_quiet(WAIT) and eng._lanes.wait_idle(WAIT)
        assert eng.wait_idle(WAIT)
        assert sum(riding.rode) + sum(riding.alone) == 20  # each success recorded once
        # due claims went alone (the one in 20 that may ride is a capacity round: the lone
        # worker's lane was starved, so its freed slot asked for a round of its own)
        assert sum(riding.alone) >= 18, (riding.rode, riding.alone)
        assert {eng.get(i).state for i in ids} == {"succeeded"}
    finally:
        eng.shutdown()


def test_a_success_with_no_claim_due_soon_is_flushed_when_its_lane_goes_idle(riding, clock):
    # two workers: the claim leaves one free (not starved), so no round follows at once
    eng = Scheduler(2, store=riding, clock=clock)  # type: ignore[arg-type]
    try:
        eng.after(noop, 1.0)  # the next claim is 1 s away: far past the ride delay
        assert eng._dispatcher.wait_quiet(WAIT)
        first = eng.after(noop, 0)
        assert eng._dispatcher.wait_quiet(WAIT) and eng._lanes.wait_idle(WAIT)
        assert riding.alone == [1] and eng.get(first).state == "succeeded"
    finally:
        eng.shutdown()
