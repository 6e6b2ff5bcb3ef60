"""Shutdown with a timeout: the timeout bounds the whole wait (not each worker thread's),
a bad timeout is refused before anything stops, and a process that exits with jobs still
running hands their leases back (``exiting=True``, as ``duetime run`` does), so another
owner runs them again at once, as after a crash, instead of a lease later. Every store
kind; the jobs block on events (no sleeps)."""

from __future__ import annotations

import math
import threading

import pytest

from scheduler import task
from scheduler.model import After, JobSpec, TaskRef
from tests.helpers import WAIT

LEASE = 30.0


_gate: dict[str, threading.Event | threading.Barrier] = {}


@task("tests.shutdown.hold")
def _hold() -> None:
    _gate["started"].wait(WAIT)
    _gate["release"].wait(WAIT)


def _running(make_engine, store, n: int) -> tuple[object, threading.Event]:
    """An engine of ``n`` workers, each running a job that blocks until the event."""
    release = threading.Event()
    _gate.update(release=release, started=threading.Barrier(n + 1))
    eng = make_engine(num_workers=n, store=store, lease=LEASE)
    for i in range(n):
        eng.after(_hold, 0, job_id=f"held-{i}")
    _gate["started"].wait(WAIT)
    return eng, release


def _taken_over_at_once(clock, store) -> None:
    """Both held jobs' leases were handed back: another owner claims them again now."""
    clock.advance(0.01)  # past the handed-back leases (1 ms), far before 30 s
    store.add(JobSpec("probe", TaskRef("tests.noop"), After(60)))  # a namespace in use
    batch = store.claim_due({"default": 4}, LEASE, "other")
    assert sorted((c.job_id, c.attempt) for c in batch.claims) == [("held-0", 2), ("held-1", 2)]


def test_a_shutdown_that_times_out_while_exiting_hands_the_running_leases_back(
    make_engine, clock, store, caplog
):
    eng, release = _running(make_engine, store, 2)
    try:
        eng.shutdown(wait=True, timeout=0.05, exiting=True)
        assert "2 job(s) still running after 0.05s; 2 lease(s) handed back" in caplog.text
        _taken_over_at_once(clock, store)
    finally:
        release.set()


def test_a_shutdown_that_times_out_keeps_the_leases_of_a_process_that_lives_on(
    make_engine, clock, store
):
    eng, release = _running(make_engine, store, 2)
    try:
        eng.shutdown(wait=True, timeout=0.05)  # not exiting: the jobs go on running here
        clock.advance(0.01)
        assert store.claim_due({"default": 4}, LEASE, "other").claims == []
    finally:
        release.set()


@pytest.mark.parametrize("timeout", [math.nan, -1.0, -math.inf, "5", True])
def test_a_bad_shutdown_timeout_is_refused_and_stops_nothing(make_engine, timeout):
    eng = make_engine()
    with pytest.raises((TypeError, ValueError), match="timeout must be a number of seconds"):
        eng.shutdown(timeout=timeout)
    assert not eng.closed
    eng.shutdown(timeout=math.inf)  # inf: no limit, as None
    assert eng.closed


def test_serve_cancelled_while_exiting_hands_the_running_leases_back(make_engine, clock, store):
    """``Scheduler.serve(exiting=True)``: an asyncio program that ends after the task is
    cancelled hands back the leases of jobs still running, as ``duetime run`` does."""
    import asyncio

    eng, release = _running(make_engine, store, 2)

    async def main() -> None:
        serving = asyncio.create_task(eng.serve(shutdown_timeout=0.05, exiting=True))
        await asyncio.sleep(0)  # serve is waiting for its cancellation
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving

    try:
        asyncio.run(main())
        _taken_over_at_once(clock, store)
    finally:
        release.set()
