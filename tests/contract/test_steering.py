"""Pause and trigger, alike in every store (docs/guarantees.md, "Pause, resume and
trigger"): a pause holds every new start of a job (a retry of a failure, a re-run after a
lost lease, a run handed back), also when it lands while the invocation runs, until resume;
a one-off handed back is pending as before its claim, and trigger brings it forward.

Driven directly with a fake clock, as the contract suite (test_store.py)."""

from __future__ import annotations

from scheduler.model import After, Commit
from tests.helpers import spec

ALL = {"default": 10}
LEASE = 30.0


def claim(store, lease=LEASE):
    return store.claim_due(ALL, lease, "owner-1").claims


def test_a_retry_of_a_job_paused_while_it_ran_waits_for_resume(store, clock):
    store.add(spec("a", After(0)))
    (c,) = claim(store)
    assert store.pause("a") is True
    assert store.fail(c, "boom", retry_in=1.0) is Commit.OK
    clock.advance(5)
    assert claim(store) == []  # paused: the retry is held
    info = store.get("a")
    assert info.state == "paused" and info.failures == 0
    assert store.resume("a") is True
    (again,) = claim(store)
    assert (again.job_id, again.attempt) == ("a", 2)
    assert store.complete(again, None) is Commit.OK
    assert store.get("a").state == "succeeded"


def test_a_re_run_after_a_lost_lease_waits_while_the_job_is_paused(store, clock):
    store.add(spec("a", After(0)))
    claim(store)
    assert store.pause("a") is True
    clock.advance(LEASE + 1)  # the owner stalled past its lease
    assert claim(store) == []  # reaped, and held: no re-run while paused
    assert store.get("a").state == "paused"
    assert store.resume("a") is True
    (again,) = claim(store)
    assert (again.job_id, again.attempt) == ("a", 2)


def test_a_pause_after_the_lease_expired_but_before_the_reaper_ran_also_holds(store, clock):
    store.add(spec("a", After(0)))
    claim(store)
    clock.advance(LEASE + 1)  # expired, not yet reaped (no claim since)
    assert store.pause("a") is True
    assert claim(store) == []
    assert store.resume("a") is True
    assert [c.attempt for c in claim(store)] == [2]


def test_a_run_handed_back_while_the_job_is_paused_waits_for_resume(store, clock):
    store.add(spec("a", After(0)))
    (c,) = claim(store)
    assert store.pause("a") is True
    assert store.release(c) is Commit.OK
    assert claim(store) == []
    assert store.get("a").state == "paused"
    assert store.resume("a") is True
    (again,) = claim(store)
    assert (again.job_id, again.attempt) == ("a", 1)


def test_a_one_off_handed_back_is_pending_as_before_and_trigger_brings_it_forward(store, clock):
    store.add(spec("a", After(5)))
    clock.advance(5)
    (c,) = claim(store)
    assert store.release(c) is Commit.OK
    info = store.get("a")
    assert (info.state, info.next_run) == ("scheduled", c.scheduled)  # when it is due
    clock.advance(1)
    assert store.trigger("a") is True  # a waiting one-off: brought forward, not doubled
    (again,) = claim(store)
    assert (again.job_id, again.attempt) == ("a", 1)
    assert claim(store) == []


def test_next_run_of_a_one_off_waiting_for_its_retry_is_the_retry_s_due_time(store, clock):
    store.add(spec("a", After(0)))
    (c,) = claim(store)
    assert store.fail(c, "boom", retry_in=7.0) is Commit.OK
    info = store.get("a")
    assert (info.state, info.next_run) == ("scheduled", clock.now() + 7.0)
    clock.advance(7)
    (again,) = claim(store)
    assert again.attempt == 2 and store.get("a").next_run is None  # nothing else pending
