"""Lease heartbeats report a loss only for a claim that is still held (issue 13, "honest
signals"): a renewal refused because the job finished between the heartbeat's snapshot
of its claims and the store's answer is not a loss.

Deterministic: the heartbeat's timers are a stub, so a beat runs when the test kicks it
and its end is seen when its thread is idle; the store is wrapped so that the
job finishes inside ``renew``, between the snapshot and the renewal. No sleeps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from scheduler.metrics import Metrics
from scheduler.model import After, Claim, Commit, JobSpec
from scheduler.stores.memory import MemoryStore
from scheduler.testing import FakeClock
from tests.helpers import WAIT
from workers.context import INTERRUPTED, CancelToken
from workers.coroutines import close_loop
from workers.heartbeat import Heartbeat
from workers.runner import Runner, Work

LEASE = 30.0


class StubTimers:
    """The heartbeat's timers, driven by the test: ``beat()`` runs the scheduled kick."""

    def __init__(self) -> None:
        self.calls: list[Callable[[], None]] = []
        self.cond = threading.Condition()

    def call_later(self, delay: float, fn: Callable[[], None]) -> int:
        with self.cond:
            self.calls.append(fn)
            self.cond.notify_all()
            return len(self.calls)

    def cancel(self, tid: int) -> None:
        pass

    def beat(self) -> None:
        """Run one heartbeat and return once it is over (the kick is its Offloaded's)."""
        with self.cond:
            kick = self.calls[-1]
        kick()
        assert kick.__self__.idle(WAIT), "the beat hung"  # type: ignore[attr-defined]


class Counted(Metrics):
    def __init__(self) -> None:
        self.lost = 0
        self.renewed_n = 0

    def renewed(self, count: int) -> None:
        self.renewed_n += count

    def lease_lost(self, count: int) -> None:
        self.lost += count


class Wrapped:
    """A MemoryStore whose ``renew`` first runs ``before_renew`` (the race's middle) and
    whose ``complete`` runs ``around_complete`` hooks."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.before_renew: Callable[[], None] = lambda: None
        self.before_complete: Callable[[], None] = lambda: None
        self.completed = threading.Event()

    def renew(self, claims: Any, lease: float) -> list[Commit]:
        self.before_renew()
        return self.store.renew(claims, lease)

    def complete(self, claim: Claim, result: Any) -> Commit:
        self.before_complete()
        out = self.store.complete(claim, result)
        self.completed.set()
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def claimed(store: MemoryStore, fn: Callable[[], Any] = lambda: None) -> Claim:
    store.add(JobSpec(job_id="j", target=fn, schedule=After(0.0)))
    (claim,) = store.claim_due({"default": 1}, LEASE, "me").claims
    return claim


def run_on_a_thread(
    store: Wrapped, clock: FakeClock, claim: Claim
) -> tuple[Counted, StubTimers, threading.Thread]:
    """The real runner and heartbeat, on stub timers, running ``claim`` on a thread of
    its own (started): the metrics, the timers (``beat()``) and the thread."""
    metrics, timers = Counted(), StubTimers()
    hb = Heartbeat(store, timers, LEASE, metrics)  # type: ignore[arg-type]
    runner = Runner(
        store,  # type: ignore[arg-type]
        clock,
        timers,  # type: ignore[arg-type]
        lambda target: target,  # type: ignore[arg-type,return-value]
        heartbeat=hb,
        metrics=metrics,
    )

    def work() -> None:  # as a pool's worker thread: its event loop goes with it
        try:
            runner.run(Work(claim, clock.now()))
        finally:
            close_loop()

    worker = threading.Thread(target=work)
    worker.start()
    return metrics, timers, worker


def lease_lines(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage()]


def test_a_job_finished_between_snapshot_and_renewal_is_not_a_loss(caplog):
    """The race as it happened: the heartbeat snapshots its claims; before its renewal
    reaches the store, the job's outcome is recorded (which ends the lease) and the claim
    dropped; the store refuses the renewal. Old code: "lease lost" logged, counted, and
    the finished job's token cancelled."""
    clock = FakeClock(1000)
    store = Wrapped(MemoryStore(clock))
    claim = claimed(store.store)
    metrics, timers = Counted(), StubTimers()
    hb = Heartbeat(store, timers, LEASE, metrics)  # type: ignore[arg-type]
    token = CancelToken()
    hb.hold(claim, token)

    def job_finishes() -> None:  # what the runner does once the job returned
        assert store.store.complete(claim, None) is Commit.OK
        hb.drop(claim)

    store.before_renew = job_finishes
    with caplog.at_level(logging.INFO):
        timers.beat()
    assert store.store.renew([claim], LEASE) == [Commit.LEASE_LOST]  # it was refused
    assert metrics.lost == 0
    assert lease_lines(caplog) == []
    assert not token.cancelled()


def test_the_runner_finishing_during_the_renewal_is_not_a_loss(caplog):
    """The same race through the real runner: the job returns inside the renewal and its
    commit lands before the store answers; whether or not the runner has dropped the
    claim by the time the heartbeat judges the answer, no loss is reported."""
    clock = FakeClock(1000)
    store = Wrapped(MemoryStore(clock))
    go, started = threading.Event(), threading.Event()

    def job() -> None:
        started.set()
        assert go.wait(WAIT)

    claim = claimed(store.store, job)
    metrics, timers, worker = run_on_a_thread(store, clock, claim)
    assert started.wait(WAIT)

    def job_finishes() -> None:  # between the snapshot and the renewal
        go.set()
        assert store.completed.wait(WAIT)

    store.before_renew = job_finishes
    with caplog.at_level(logging.INFO):
        timers.beat()
        worker.join(WAIT)
    assert not worker.is_alive()
    assert store.store.get("j").runs == 1
    assert metrics.lost == 0
    assert lease_lines(caplog) == []


def test_a_claim_still_running_whose_renewal_is_refused_is_lost_once(caplog):
    """A real loss (the lease lapsed and another replica took the invocation over) is
    still reported: once, by the renewal; the refused commit that follows adds nothing."""
    clock = FakeClock(1000)
    store = Wrapped(MemoryStore(clock))
    go, started = threading.Event(), threading.Event()

    def job() -> None:
        started.set()
        assert go.wait(WAIT)

    claim = claimed(store.store, job)
    metrics, timers, worker = run_on_a_thread(store, clock, claim)
    assert started.wait(WAIT)
    clock.advance(LEASE + 1)  # the lease lapses; another replica takes it over
    (other,) = store.store.claim_due({"default": 1}, LEASE, "other").claims
    assert other.attempt == 2
    with caplog.at_level(logging.INFO):
        timers.beat()
        assert metrics.lost == 1
        go.set()
        worker.join(WAIT)
    assert not worker.is_alive()
    assert metrics.lost == 1
    assert len(lease_lines(caplog)) == 1
    assert "at renewal" in lease_lines(caplog)[0]


def test_a_renewal_refused_while_the_outcome_is_recorded_is_judged_by_the_commit(caplog):
    """The lease really was lost, and the renewal's refusal arrives while the job's
    commit is in flight: the heartbeat leaves it to the commit, whose refusal reports the
    loss, once."""
    clock = FakeClock(1000)
    store = Wrapped(MemoryStore(clock))
    go, started = threading.Event(), threading.Event()
    committing, renewed = threading.Event(), threading.Event()

    def job() -> None:
        started.set()
        assert go.wait(WAIT)

    claim = claimed(store.store, job)
    metrics, timers, worker = run_on_a_thread(store, clock, claim)
    assert started.wait(WAIT)
    clock.advance(LEASE + 1)
    store.store.claim_due({"default": 1}, LEASE, "other")  # taken over

    def commit_waits_for_the_renewal() -> None:
        committing.set()
        assert renewed.wait(WAIT)

    def job_returns_and_commits() -> None:
        go.set()
        assert committing.wait(WAIT)

    store.before_complete = commit_waits_for_the_renewal
    store.before_renew = job_returns_and_commits
    with caplog.at_level(logging.INFO):
        timers.beat()  # refused: the commit is in flight, so not judged here
        assert metrics.lost == 0
        renewed.set()
        worker.join(WAIT)
    assert not worker.is_alive()
    assert metrics.lost == 1
    (line,) = lease_lines(caplog)
    assert "when recording its outcome" in line


def test_a_store_error_at_renewal_is_neither_a_renewal_nor_a_loss(caplog):
    clock = FakeClock(1000)
    store = Wrapped(MemoryStore(clock))
    claim = claimed(store.store)
    metrics, timers = Counted(), StubTimers()
    hb = Heartbeat(store, timers, LEASE, metrics)  # type: ignore[arg-type]
    token = CancelToken()
    hb.hold(claim, token)

    def unreachable() -> None:
        raise ConnectionError("down")

    store.before_renew = unreachable
    with caplog.at_level(logging.INFO):
        timers.beat()
    assert (metrics.renewed_n, metrics.lost) == (0, 0)
    assert not token.cancelled()
    assert any("lease renewal failed" in r.getMessage() for r in caplog.records)


def test_a_batch_of_recorded_outcomes_settles_each_claim_and_reports_a_refusal_once(caplog):
    """Batched acks settle their claims in one call (``settled_many``): an accepted one
    and a deleted job's are just released; a refused one is a lost lease, reported once;
    a given-up batch (None) releases all and reports nothing."""
    clock = FakeClock(1000)
    store = MemoryStore(clock)
    hb = Heartbeat(store, StubTimers(), LEASE, Counted())  # type: ignore[arg-type]
    tokens: list[CancelToken] = []
    for j in ("a", "b", "c"):
        store.add(JobSpec(job_id=j, target=lambda: None, schedule=After(0.0)))
    claims = store.claim_due({"default": 3}, LEASE, "me").claims
    for c in claims:
        tokens.append(CancelToken())
        hb.hold(c, tokens[-1])
    with caplog.at_level(logging.INFO):
        hb.settled_many(claims, [Commit.OK, Commit.LEASE_LOST, Commit.NOT_FOUND])
        hb.settled_many(claims, [Commit.LEASE_LOST] * 3)  # no longer held: nothing
    (line,) = lease_lines(caplog)
    assert "job b" in line and "when recording its outcome" in line
    assert [t.reason for t in tokens] == [None, "lease lost", None]
    hb.hold(claims[0], CancelToken())
    hb.settled_many(claims[:1], None)  # given up: released, the lease will expire
    assert len(lease_lines(caplog)) == 1


def test_a_lost_lease_cancels_an_async_job_which_sees_it_in_its_own_tasks():
    """Issue 14: the loss reaches a coroutine job as a ``CancelledError`` at its next
    await; ``current_invocation()`` in a task it spawned reports the cancellation, its
    reason and the claim's fence; a job that swallows the error is still not a success."""
    import asyncio

    from scheduler import current_invocation

    clock = FakeClock(1000)
    store = Wrapped(MemoryStore(clock))
    started, ended = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    async def job() -> str:
        told = asyncio.Event()

        async def child() -> None:  # a task the job spawned, running in its context
            await told.wait()
            inv = current_invocation()
            seen["child"] = (inv.cancelled(), inv.cancel_reason, inv.fence)

        task = asyncio.create_task(child())
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen["job"] = "cancelled"
            told.set()
            await task
            return "swallowed it"  # never recorded as a success
        finally:
            ended.set()
        return "never"

    claim = claimed(store.store, job)
    metrics, timers, worker = run_on_a_thread(store, clock, claim)
    assert started.wait(WAIT)
    clock.advance(LEASE + 1)  # the lease lapses; another replica takes it over
    (other,) = store.store.claim_due({"default": 1}, LEASE, "other").claims
    timers.beat()  # the renewal is refused: the job is told
    assert ended.wait(WAIT)
    worker.join(WAIT)
    assert not worker.is_alive()
    assert seen == {"job": "cancelled", "child": (True, "lease lost", claim.fence)}
    assert metrics.lost == 1
    assert other.fence > claim.fence
    info = store.store.get("j")
    assert info is not None and info.runs == 0, info  # the swallowed cancel is no success


class AskedToStop(Wrapped):
    """A store that carries interrupts (``Interrupts``): every job was asked to stop."""

    def interrupt(self, job_id: str) -> int:
        return 1

    def interrupted(self, job_ids: Any) -> set[str]:
        return set(job_ids)


def test_an_interrupt_is_logged_with_the_jobs_fields(caplog):
    store = AskedToStop(MemoryStore(FakeClock(1000)))
    claim = claimed(store.store)
    hb = Heartbeat(store, StubTimers(), LEASE, Counted(), owner="replica-1")  # type: ignore[arg-type]
    token = CancelToken()
    hb.hold(claim, token)
    with caplog.at_level(logging.INFO, logger="duetime.workers"):
        hb._stop_interrupted()
    assert token.reason == INTERRUPTED
    (line,) = [r for r in caplog.records if r.getMessage().endswith(": interrupted")]
    assert (line.event, line.job_id, line.replica) == ("interrupted", "j", "replica-1")  # type: ignore[attr-defined]
