"""workers/: failure isolation, retries with backoff, timeouts, lanes, cancellation."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import random
import sys
import threading
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler import RetryPolicy, current_invocation, task
from scheduler.model import After, JobSpec, TaskRef
from tests.helpers import WAIT, Recorder, noop
from workers.lanes import Lanes
from workers.pool import WorkerPool
from workers.retry import retry_delay
from workers.runner import UNKNOWN_TASK_ATTEMPTS


def test_a_failing_job_is_logged_counted_and_the_worker_goes_on(make_engine, clock, caplog):
    rec = Recorder(clock)
    eng = make_engine(num_workers=1)

    def boom() -> None:
        raise ValueError("kaput")

    eng.after(boom, 0, job_id="bad")
    eng.after(rec.job("next"), 0)
    assert rec.wait_for(1)
    assert eng.wait_idle()
    info = eng.get("bad")
    assert (info.state, info.failures, info.last_error) == ("failed", 1, "ValueError: kaput")
    msgs = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any(
        "bad@" in r.getMessage() and "Traceback" in r.getMessage() and "kaput" in r.getMessage()
        for r in msgs
    )


def test_a_failure_traceback_starts_at_the_job_not_at_the_worker(make_engine, clock):
    eng = make_engine(num_workers=1)

    def inner() -> None:
        raise ValueError("deep")

    def outer() -> None:
        inner()

    def refuses(x: int) -> None:
        pass

    async def later() -> None:
        await asyncio.sleep(0)
        raise ValueError("awaited")

    eng.after(outer, 0, job_id="nested")
    eng.after(later, 0, job_id="async")  # was from asyncio's run_until_complete
    eng.after(functools.partial(refuses, y=1), 0, job_id="call")  # fails in the call itself
    assert eng.wait_idle()
    lines = eng.get("nested").last_traceback.splitlines()
    assert lines[0] == "Traceback (most recent call last):", lines
    assert lines[1].endswith(", in outer") and __file__ in lines[1], lines  # was runner.py
    assert not any("workers" + os.sep in line for line in lines), lines
    assert lines[-1] == "ValueError: deep"
    lines = eng.get("async").last_traceback.splitlines()
    assert lines[1].endswith(", in later") and lines[-1] == "ValueError: awaited", lines
    whole = eng.get("call").last_traceback  # only the worker's frames: all of them, kept
    assert "in run" in whole and "unexpected keyword argument 'y'" in whole, whole


def test_system_exit_in_a_job_does_not_kill_the_worker(make_engine, clock):
    rec = Recorder(clock)
    eng = make_engine(num_workers=1)
    eng.after(lambda: sys.exit(3), 0, job_id="exit")
    eng.after(rec.job("after"), 0)
    assert rec.wait_for(1)
    assert eng.wait_idle()
    assert eng.get("exit").last_error == "SystemExit: 3"


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this __str__ fails")


@task("tests.workers.unprintable")
def _raise_unprintable() -> None:
    raise _Unprintable()


@task("tests.workers.huge_error")
def _raise_huge() -> None:
    raise ValueError("e" * 10_000_000)


@pytest.mark.parametrize("store_kind", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
def test_an_error_that_cannot_be_printed_or_is_huge_still_ends_its_invocation(
    make_engine, clock, caplog, store_kind, request
):
    """An exception whose ``__str__`` raises stopped the worker's bookkeeping: the
    invocation stayed "running" until its lease expired (and ran again). A 10 MB message
    was logged whole and, in process, kept whole. Both now end failed, bounded."""
    from workers.failures import ERROR_MAX

    store = None
    if store_kind == "redis":
        from scheduler.stores.redis import RedisStore

        store = RedisStore(
            request.getfixturevalue("redis_url"), request.getfixturevalue("redis_ns"), clock=clock
        )
        request.addfinalizer(store.close)
    eng = make_engine(num_workers=1, store=store)
    eng.after("tests.workers.unprintable", 0, job_id="unprintable")
    eng.after("tests.workers.huge_error", 0, job_id="huge")
    assert eng.wait_idle()
    assert eng.running() == []
    bad, big = eng.get("unprintable"), eng.get("huge")
    assert (bad.state, bad.failures) == ("failed", 1), bad
    assert bad.last_error == "_Unprintable: <str() of the exception failed: RuntimeError>"
    assert (big.state, big.failures) == ("failed", 1)
    assert big.last_error.startswith("ValueError: eee") and len(big.last_error) <= ERROR_MAX
    assert "10000012 characters in all" in big.last_error
    longest = max(len(r.getMessage()) for r in caplog.records)
    assert longest < ERROR_MAX + 2 * 8192 + 1000, longest  # message + bounded traceback


class _Unshowable:
    def __repr__(self) -> str:
        raise RuntimeError("this __repr__ fails")


RESULT_RUNS: list[str] = []


@task("tests.workers.unshowable_result")
def _return_unshowable() -> object:
    RESULT_RUNS.append("unshowable")
    return _Unshowable()


@task("tests.workers.deep_result")
def _return_deep() -> object:
    RESULT_RUNS.append("deep")
    x: list[object] = []
    for _ in range(100_000):
        x = [x]
    return x


@pytest.mark.redis
def test_a_result_that_is_not_json_is_a_failure_of_its_invocation_recorded_once(
    make_engine, clock, redis_url, redis_ns, request
):
    """A return value that is not JSON (a ``__repr__`` that raises, too deep, a set): it
    used to be recorded as a note standing for it, a success whose value a handle could
    never return. Now the invocation fails with ``ResultNotJSONError`` saying what to
    return (docs/results.md), once: the commit itself never raises, so nothing runs
    again after its lease."""
    from scheduler.stores.redis import RedisStore

    store = RedisStore(redis_url, redis_ns, clock=clock)
    request.addfinalizer(store.close)
    eng = make_engine(num_workers=1, store=store)
    RESULT_RUNS.clear()
    once = RetryPolicy(max_attempts=1)
    eng.after("tests.workers.unshowable_result", 0, job_id="unshowable", retry=once)
    eng.after("tests.workers.deep_result", 0, job_id="deep", retry=once)
    assert eng.wait_idle()
    assert eng.running() == []
    one, deep = eng.get("unshowable"), eng.get("deep")
    assert (one.state, deep.state) == ("failed", "failed")
    assert one.last_error.startswith(
        "ResultNotJSONError: the job returned a _Unshowable, which is not JSON"
    )
    assert deep.last_error.startswith("ResultNotJSONError: the job returned a list")
    assert "nested too deep" in deep.last_error
    assert one.last_result is None and deep.last_result is None
    clock.advance(3600)  # long past any lease: nothing runs again
    assert eng.wait_idle() and sorted(RESULT_RUNS) == ["deep", "unshowable"]


def test_retries_back_off_exponentially_then_dead_letter(make_engine, clock):
    attempts = []

    def flaky() -> None:
        attempts.append((current_invocation().attempt, clock.now()))
        raise RuntimeError("nope")

    eng = make_engine()
    policy = RetryPolicy(max_attempts=3, backoff=1, factor=2, jitter=0)
    eng.after(flaky, 0, job_id="f", retry=policy)
    assert eng.wait_idle()
    t0 = attempts[0][1]
    for step in (1, 2):
        clock.advance(step)
        assert eng.wait_idle()
    assert [(a, t - t0) for a, t in attempts] == [(1, 0), (2, 1), (3, 3)]
    info = eng.get("f")
    assert info.state == "failed" and len(info.dead_letters) == 1
    assert [e.kind for e in eng.events() if e.job_id == "f" and e.kind != "claimed"] == [
        "scheduled",
        "retried",
        "retried",
        "failed",
    ]


@given(
    attempt=st.integers(1, 30),
    seed=st.integers(0, 2**32),
    jitter=st.floats(0, 1),
    backoff=st.floats(0, 100),
    factor=st.floats(1, 4),
)
def test_retry_delay_stays_within_its_jitter_band(attempt, seed, jitter, backoff, factor):
    policy = RetryPolicy(
        max_attempts=50, backoff=backoff, factor=factor, max_backoff=300, jitter=jitter
    )
    d = retry_delay(policy, attempt, random.Random(seed))
    base = min(300, backoff * factor ** (attempt - 1))
    assert base * (1 - jitter) - 1e-9 <= d <= base * (1 + jitter) + 1e-9


def test_no_retry_after_the_last_attempt():
    assert retry_delay(RetryPolicy(max_attempts=2), 2, random.Random(0)) is None


def test_timeout_cancels_cooperatively_and_records_a_failure(make_engine, clock):
    seen = {}
    started = threading.Event()

    def slow() -> None:
        inv = current_invocation()
        started.set()
        seen["stopped"] = inv.token.wait(WAIT)
        seen["reason"] = inv.cancel_reason

    eng = make_engine()
    eng.after(slow, 0, job_id="slow", timeout=2)
    assert started.wait(WAIT)
    clock.advance(1.999)
    assert not current_job_cancelled(eng, "slow")
    clock.advance(0.001)
    assert eng.wait_idle()
    assert seen == {"stopped": True, "reason": "timeout"}
    assert "timeout of 2s" in eng.get("slow").last_error


def current_job_cancelled(eng, job_id: str) -> bool:
    return any(t.cancelled() for t in eng._runner._active.get(job_id, []))


def test_lane_default_timeout(make_engine, clock):
    started = threading.Event()
    eng = make_engine(lanes={"batch": 1}, lane_timeouts={"batch": 5})
    eng.after(
        lambda: (started.set(), current_invocation().token.wait(WAIT)), 0, job_id="b", lane="batch"
    )
    assert started.wait(WAIT)
    clock.advance(5)
    assert eng.wait_idle()
    assert "timeout" in eng.get("b").last_error


def test_a_full_lane_does_not_starve_another(make_engine, clock):
    gate = threading.Event()
    rec = Recorder(clock)
    eng = make_engine(num_workers=1, lanes={"slow": 1})
    eng.after(rec.job("long", lambda: gate.wait(WAIT)), 0, lane="slow")
    eng.after(rec.job("long-2"), 0, lane="slow")
    assert rec.wait_for(1)
    eng.after(rec.job("quick"), 0)
    assert rec.wait_for(2)
    assert rec.labels() == ["long", "quick"]
    gate.set()
    assert rec.wait_for(3)


def test_unknown_lane_is_refused_at_schedule_time(make_engine):
    eng = make_engine()
    with pytest.raises(ValueError, match="unknown lane 'gpu'"):
        eng.after(lambda: None, 0, lane="gpu")


def test_cancel_with_wait_and_interrupt(make_engine, clock):
    started, stopped = threading.Event(), threading.Event()

    def long() -> None:
        started.set()
        current_invocation().token.wait(WAIT)
        stopped.set()

    eng = make_engine()
    eng.every(long, 1, job_id="long")
    clock.advance(1)
    assert started.wait(WAIT)
    assert eng.cancel("long", wait=True, timeout=WAIT, interrupt=True) is True
    assert stopped.is_set()  # interrupted, and cancel returned after it ended
    assert eng.get("long").state == "cancelled"


@task("tests.add_to")
def add_to(key: str, n: int) -> int:
    return n + 1


def test_registered_task_by_name_with_json_kwargs(make_engine):
    eng = make_engine()
    eng.after("tests.add_to", 0, job_id="t", kwargs={"key": "k", "n": 41})
    assert eng.wait_idle()
    assert eng.get("t").last_result == 42


def test_unknown_task_is_handed_back_then_failed_not_retried_forever(make_engine, clock, store):
    """In process. A shared store never hands a replica a task it lacks (next test)."""
    eng = make_engine(store=store)
    store.add(JobSpec("ghost", TaskRef("no.such.task"), After(0)))
    eng.after(noop, 0, job_id="fine")
    assert eng.wait_idle()
    assert eng.get("fine").state == "succeeded"
    if hasattr(store, "keys"):  # RedisStore: task-aware claims (tests/lua/test_task_aware.py)
        for _ in range(UNKNOWN_TASK_ATTEMPTS + 1):
            clock.advance(60)
            assert eng.wait_idle()
        info = eng.get("ghost")
        assert (info.state, info.attempts, info.failures) == ("scheduled", 0, 0)
        from scheduler.stores.redis.reading import fleet

        assert fleet.waiting(store) == {"no.such.task": 1}  # waits, visibly, for a replica
        return
    for _ in range(UNKNOWN_TASK_ATTEMPTS - 1):  # handed back with a growing delay
        assert eng.get("ghost").state == "scheduled"
        clock.advance(60)
        assert eng.wait_idle()
    info = eng.get("ghost")
    assert info.state == "failed" and "no task named 'no.such.task'" in info.last_error
    assert info.attempts == UNKNOWN_TASK_ATTEMPTS


def test_arguments_that_do_not_parse_fail_at_once_as_malformed(make_engine, store):
    """Issue 12: arguments that reach a worker unparsed (a store that does not check
    them) fail at once as malformed, never after the lease lapsed. A shared store reads
    them at claim and moves the job aside (its quarantine) instead."""
    store.add(JobSpec("garbled", TaskRef("tests.add_to", "{not json"), After(0)))
    store.add(JobSpec("listed", TaskRef("tests.add_to", "[1, 2]"), After(0)))
    eng = make_engine(store=store)  # after the adds: a Redis wake-up could trail wait_idle
    assert eng.wait_idle()
    for job in ("garbled", "listed"):
        if hasattr(store, "keys"):  # RedisStore
            record = json.loads(store.redis.hget(store.keys.quarantined, job))
            assert record["reason"].startswith("malformed job data"), record
            continue
        info = eng.get(job)
        assert info.state == "failed" and info.attempts == 1, info
        assert info.last_error.startswith("malformed job data"), info.last_error


def test_pool_close_returns_unstarted_items():
    ran = []
    pool = WorkerPool("p", 1, ran.append)
    with pool._cond:  # hold the pool so its worker cannot pick the item up
        pool.submit("x")
        unstarted = pool.close()
    assert unstarted == ["x"] and ran == []
    assert pool.join(WAIT)


def _busy_lanes(sizes: dict[str, int]) -> tuple[Lanes[int], threading.Event, list[float]]:
    """Lanes whose every worker runs a job that blocks until the event is set, and whose
    threads record the timeout each ``join`` of theirs is given."""
    release = threading.Event()
    started = threading.Barrier(sum(sizes.values()) + 1)

    def run(item: int) -> None:
        started.wait(WAIT)
        release.wait(WAIT)

    lanes: Lanes[int] = Lanes(sizes, run, lambda: None)
    for lane, size in sizes.items():
        for i in range(size):
            lanes.submit(lane, i)
    started.wait(WAIT)
    asked: list[float] = []
    for pool in lanes._pools.values():
        for t in pool._threads:
            t.join = lambda timeout=None, _join=t.join: (asked.append(timeout), _join(timeout))
    lanes.close()
    return lanes, release, asked


@pytest.mark.parametrize("sizes", [{"default": 4}, {"default": 2, "slow": 2}])
def test_a_join_waits_its_timeout_in_all_not_once_per_thread(sizes):
    # Each thread used to be joined with the whole timeout: 4 busy workers held a 30 s
    # shutdown for 120 s, past a container's grace period (SIGKILL mid-job).
    lanes, release, asked = _busy_lanes(sizes)
    try:
        assert lanes.join(0.2) is False
        assert len(asked) == 4 and asked[0] == pytest.approx(0.2, abs=0.05)
        assert sum(asked) <= 0.2 + 1e-9, asked  # the rest: what was left, ~0
    finally:
        release.set()
    assert lanes.join(WAIT)


def test_shutdown_hands_unstarted_claims_back_to_the_store(make_engine, clock, store, monkeypatch):
    eng = make_engine(store=store)
    store.add(JobSpec("held", noop, After(0), lane="elsewhere"))  # the engine serves no
    batch = store.claim_due({"elsewhere": 1}, None, "other")  # such lane: no race
    from workers.runner import Work

    close = eng._lanes.close
    monkeypatch.setattr(eng._lanes, "close", lambda: close() + [Work(batch.claims[0], clock.now())])
    eng.shutdown()
    assert store.get("held").state == "scheduled"
    assert [e.kind for e in store.events()][-1] == "released"


def test_a_failing_hand_back_does_not_stop_the_shutdown(
    make_engine, clock, store, monkeypatch, caplog
):
    """The store fails the release (Redis gone): the shutdown still ends everything (the
    timers thread, the live-replica entry) and says what it could not hand back; the
    store is not asked again for the rest, and a second shutdown is a no-op."""
    eng = make_engine(store=store)
    for job_id in ("held-1", "held-2"):
        store.add(JobSpec(job_id, noop, After(0), lane="elsewhere"))
    batch = store.claim_due({"elsewhere": 2}, 30, "other")
    from workers.runner import Work

    asked: list[str] = []

    def release(claim: object) -> None:
        asked.append(claim.job_id)  # type: ignore[attr-defined]
        raise ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    retired: list[str] = []
    monkeypatch.setattr(store, "release", release)
    monkeypatch.setattr(eng, "_retire", lambda: retired.append("retired"))
    close = eng._lanes.close
    works = [Work(c, clock.now()) for c in batch.claims]
    monkeypatch.setattr(eng._lanes, "close", lambda: close() + works)
    eng.shutdown()
    assert len(asked) == 1 and retired == ["retired"]
    assert "could not hand back 2 claimed invocation(s) (Error 111" in caplog.text
    thread = eng._timers._thread
    assert thread is None or not thread.is_alive()
    eng.shutdown()
    assert retired == ["retired"]


def test_each_shutdown_step_runs_whatever_the_ones_before_raised():
    from scheduler.engine import each_step

    ran: list[str] = []

    def fails(name: str) -> Callable[[], None]:
        def step() -> None:
            ran.append(name)
            raise RuntimeError(name)

        return step

    with pytest.raises(RuntimeError, match="first"):
        each_step(fails("first"), lambda: ran.append("second"), fails("third"))
    assert ran == ["first", "second", "third"]
