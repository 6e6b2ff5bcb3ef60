"""Values at the ends of what the API takes, each found by using duetime as a stranger
would: a due time centuries away (the in-process dispatcher died on it: ``cond.wait``
overflowed ``time_t``), an interval of a nanosecond (the dispatcher spun under its lock),
retry backoffs past every other duration's bound, and an engine's ``resync`` and
``owner`` (taken unchecked)."""

from __future__ import annotations

import math
import threading
import time

import pytest

from scheduler import JobScheduler, RetryPolicy, Scheduler, schedules
from tests.helpers import WAIT


@pytest.mark.parametrize("far", [1e10, 9e10])
def test_a_job_centuries_away_leaves_the_real_clock_dispatcher_running(far):
    with JobScheduler(num_workers=1) as s:
        s.schedule(lambda: None, far)
        time.sleep(0.05)  # the dispatcher is now waiting for it (no signal says so)
        ran = threading.Event()
        s.schedule(ran.set, 0.01)
        assert ran.wait(WAIT), "the dispatcher died waiting for a due time centuries away"


def test_every_and_retry_waits_centuries_long_are_waited_for():
    with Scheduler(1) as engine:
        engine.every(lambda: None, 1e10, job_id="far")
        failing = threading.Event()

        def fails() -> None:
            failing.set()
            raise RuntimeError("once")

        engine.after(fails, 0, job_id="retry", retry=RetryPolicy(2, backoff=1e10, max_backoff=1e10))
        assert failing.wait(WAIT)
        assert engine.wait_idle()  # the failure is recorded: only waits 1e10 s long are left
        time.sleep(0.05)  # the dispatcher is now waiting for them (no signal says so)
        ran = threading.Event()
        engine.after(ran.set, 0.01)
        assert ran.wait(WAIT)
        assert engine.get("retry").state == "scheduled"  # its retry waits, 1e10 s away


@pytest.mark.parametrize("tiny", [1e-10, 4e-10, 1e-300, 5e-324, 9.99e-7])
def test_an_interval_under_a_microsecond_is_refused(tiny):
    with Scheduler(1) as engine, pytest.raises(ValueError, match="at least 1e-06 s"):
        engine.every(lambda: None, tiny)


def test_the_grid_of_an_interval_rounded_to_the_nanosecond_is_found_at_once():
    """1.2345678901e-6 s is no fraction of a millisecond with a small denominator: its
    grid steps by 1.235e-6 s. Dividing by the raw float put k ~2.8e7 steps off after a
    day, walked back one at a time."""
    interval, anchor, now = 1.2345678901e-6, 1000.0, 1000.0 + 86_400
    started = time.process_time()
    k = schedules.last_index_at_or_before(anchor, interval, now)
    j = schedules.first_index_at_or_after(anchor, interval, now)
    assert time.process_time() - started < 1.0
    assert (
        schedules.occurrence(anchor, interval, k)
        <= now
        < schedules.occurrence(anchor, interval, k + 1)
    )
    assert j in (k, k + 1) and schedules.occurrence(anchor, interval, j) >= now
    assert k == math.floor(86_400 / 1.235e-6) or k == math.floor(86_400 / 1.235e-6) - 1


@pytest.mark.parametrize("field", ["backoff", "max_backoff"])
def test_retry_backoffs_past_1e11_seconds_are_refused(field):
    with pytest.raises(ValueError, match=f"RetryPolicy.{field} must be at most 1e11 s"):
        RetryPolicy(3, **{field: 1e308})
    RetryPolicy(3, **{field: 1e11})


@pytest.mark.parametrize("resync", [0, -5, math.nan, math.inf, "soon"])
def test_a_bad_resync_is_refused_before_anything_starts(resync):
    before = threading.active_count()
    with pytest.raises((ValueError, TypeError), match="resync"):
        Scheduler(1, resync=resync)
    assert threading.active_count() == before


@pytest.mark.parametrize("owner", [5, "", " padded", "a\nb"])
def test_a_bad_owner_is_refused(owner):
    with pytest.raises(ValueError, match="owner"):
        Scheduler(1, owner=owner)


def test_a_timeout_for_a_lane_that_does_not_exist_is_refused():
    """``lane_timeouts={"slwo": 5}`` was taken: the lane meant ran without a timeout."""
    with pytest.raises(ValueError, match=r"names lane\(s\) \['slwo'\].*its lanes: default, slow"):
        Scheduler(1, lanes={"slow": 1}, lane_timeouts={"slwo": 5})
    Scheduler(1, lanes={"slow": 1}, lane_timeouts={"slow": 5, "default": 1}).shutdown()


def test_a_time_given_as_text_says_what_the_api_takes():
    """``Scheduler.at(fn, "2030-01-01T00:00Z")`` said "must be a number of seconds", as if
    an aware datetime were not taken."""
    with Scheduler(1) as engine, pytest.raises(TypeError, match="aware datetime or epoch"):
        engine.at(lambda: None, "2030-01-01T00:00Z")
