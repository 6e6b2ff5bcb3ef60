"""The two facades (docs/facades.md): behaviour, upsert, cancel, shutdown, re-entrancy."""

from __future__ import annotations

import threading

import pytest

from scheduler import JobScheduler, RecurringJobScheduler, SchedulerClosedError, current_invocation
from tests.conftest import START
from tests.helpers import WAIT, Recorder


def test_schedule_returns_increasing_int_ids(once):
    ids = [once.schedule(lambda: None, 10) for _ in range(3)]
    assert all(type(i) is int for i in ids) and ids == sorted(ids) and len(set(ids)) == 3


def test_cancel_before_run_prevents_it(once, clock):
    ran = threading.Event()
    jid = once.schedule(ran.set, 1)
    assert once.cancel(jid) is True
    clock.advance(1)
    assert once.engine.wait_idle()
    assert not ran.is_set()
    assert once.cancel(jid) is False


def test_cancel_after_run_or_unknown_is_false(once, clock):
    jid = once.schedule(lambda: None, 0)
    assert once.engine.wait_idle()
    assert once.cancel(jid) is False
    assert once.cancel(987654) is False
    assert once.cancel(-1) is False
    with pytest.raises(TypeError):
        once.cancel("1")


def test_delay_zero_runs_without_advancing(once):
    ran = threading.Event()
    once.schedule(ran.set, 0)
    assert ran.wait(WAIT)


def test_recurring_runs_on_the_fixed_grid(recurring, clock):
    seen = []
    recurring.schedule("tick", lambda: seen.append(current_invocation().scheduled_ms), 0.5)
    for _ in range(6):
        clock.advance(0.5)
        assert recurring.engine.wait_idle()
    assert seen == [round((START + 0.5 * k) * 1000) for k in range(1, 7)]


def test_recurring_slow_run_does_not_shift_the_grid(recurring, clock):
    """A run late by 0.4 s (workers saturated) leaves the next one on the grid."""
    seen = []
    recurring.schedule("tick", lambda: seen.append(current_invocation().scheduled_ms), 1)
    clock.advance(1.4)
    assert recurring.engine.wait_idle()
    clock.advance(0.6)
    assert recurring.engine.wait_idle()
    assert seen == [round((START + 1) * 1000), round((START + 2) * 1000)]


def test_upsert_same_definition_is_a_noop_keeping_the_anchor(recurring, clock):
    rec = Recorder(clock)
    fn = rec.job("x")
    recurring.schedule("x", fn, 10)
    clock.advance(7)
    recurring.schedule("x", fn, 10)  # same fn, same interval: keeps the anchor
    clock.advance(3)
    assert rec.wait_for(1)
    assert rec.starts == [("x", START + 10)]


def test_upsert_changed_definition_replaces_atomically(recurring, clock):
    rec = Recorder(clock)
    recurring.schedule("x", rec.job("old"), 10)
    clock.advance(7)
    recurring.schedule("x", rec.job("new"), 5)  # new anchor = now
    clock.advance(3)  # old occurrence at 10 must not run
    assert recurring.engine.wait_idle()
    assert rec.labels() == []
    clock.advance(2)
    assert rec.wait_for(1)
    assert rec.starts == [("new", START + 12)]


def test_deschedule(recurring, clock):
    rec = Recorder(clock)
    recurring.schedule("x", rec.job("x"), 1)
    assert recurring.deschedule("x") is True
    assert recurring.deschedule("x") is False
    assert recurring.deschedule("never") is False
    clock.advance(5)
    assert recurring.engine.wait_idle()
    assert rec.labels() == []


def test_schedule_after_shutdown_raises_and_shutdown_is_idempotent(clock):
    s = JobScheduler(num_workers=1, clock=clock)
    s.shutdown()
    s.shutdown()
    with pytest.raises(SchedulerClosedError, match="shut down"):
        s.schedule(lambda: None, 1)
    r = RecurringJobScheduler(num_workers=1, clock=clock)
    with r:
        pass
    with pytest.raises(SchedulerClosedError):
        r.schedule("x", lambda: None, 1)


def test_shutdown_waits_for_running_jobs(clock):
    s = JobScheduler(num_workers=1, clock=clock)
    started, go, finished = threading.Event(), threading.Event(), threading.Event()

    def job() -> None:
        started.set()
        go.wait(WAIT)
        finished.set()

    s.schedule(job, 0)
    assert started.wait(WAIT)
    done = threading.Event()
    t = threading.Thread(target=lambda: (s.shutdown(wait=True), done.set()))
    t.start()
    assert not done.wait(0.2)  # still waiting for the job
    go.set()
    assert done.wait(WAIT)
    assert finished.is_set()  # it returned only after the job finished
    t.join()


def test_shutdown_without_wait_returns_while_a_job_runs(clock):
    s = JobScheduler(num_workers=1, clock=clock)
    started, go = threading.Event(), threading.Event()
    s.schedule(lambda: (started.set(), go.wait(WAIT)), 0)
    assert started.wait(WAIT)
    s.shutdown(wait=False)
    go.set()


def test_shutdown_from_inside_a_job_does_not_deadlock(clock):
    s = JobScheduler(num_workers=1, clock=clock)
    done = threading.Event()

    def job() -> None:
        s.shutdown(wait=True)
        done.set()

    s.schedule(job, 0)
    assert done.wait(WAIT)
    with pytest.raises(SchedulerClosedError):
        s.schedule(lambda: None, 0)


def test_pending_jobs_do_not_run_after_shutdown(clock):
    s = JobScheduler(num_workers=1, clock=clock)
    ran = threading.Event()
    s.schedule(ran.set, 1)
    s.shutdown()
    clock.advance(5)
    assert not ran.wait(0.05)


def test_schedule_and_cancel_from_inside_running_jobs(once, clock):
    rec = Recorder(clock)
    chain_done = threading.Event()
    victim = once.schedule(rec.job("victim"), 2)

    def first() -> None:
        assert once.cancel(victim) is True
        once.schedule(rec.job("second", chain_done.set), 1)

    once.schedule(rec.job("first", first), 0)
    assert rec.wait_for(1)
    assert once.engine.wait_idle()
    clock.advance(2)
    assert chain_done.wait(WAIT)
    assert once.engine.wait_idle()
    assert rec.labels() == ["first", "second"]


def test_deschedule_from_inside_its_own_run(recurring, clock):
    rec = Recorder(clock)
    recurring.schedule("self", rec.job("self", lambda: recurring.deschedule("self")), 1)
    clock.advance(1)
    assert rec.wait_for(1)
    clock.advance(5)
    assert recurring.engine.wait_idle()
    assert rec.labels() == ["self"]
