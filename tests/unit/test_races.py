"""Races: cancel/deschedule against dispatch, concurrent upserts (many iterations,
barriers to line the threads up; outcomes checked against the linearization point)."""

from __future__ import annotations

import random
import sys
import threading

import pytest

from scheduler import JobScheduler, RecurringJobScheduler
from scheduler.testing import FakeClock
from tests.helpers import WAIT

ITERATIONS = 200


@pytest.fixture(autouse=True)
def fast_thread_switching():
    """Switch threads every 10 µs (default 5 ms) so more interleavings happen."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def test_cancel_racing_dispatch_is_all_or_nothing():
    """cancel() returns True iff the job never runs; False iff it runs exactly once."""
    clock = FakeClock()
    rng = random.Random(7)
    outcomes = {True: 0, False: 0}
    spin_max = 40_000  # jitter for the canceller, adapted until both sides win sometimes
    with JobScheduler(num_workers=2, clock=clock) as s:
        for i in range(ITERATIONS * 10):
            if i >= ITERATIONS and outcomes[True] and outcomes[False]:
                break
            if i and i % 50 == 0 and not (outcomes[True] and outcomes[False]):
                spin_max = spin_max * 4 if not outcomes[False] else max(1, spin_max // 4)
            runs = []
            jid = s.schedule(lambda runs=runs: runs.append(1), 1)
            barrier = threading.Barrier(2)
            result = {}

            def advance():
                barrier.wait()
                clock.advance(1)

            spin = rng.randrange(0, spin_max)

            def cancel(jid=jid, result=result, spin=spin):
                barrier.wait()
                for _ in range(spin):
                    pass
                result["cancelled"] = s.cancel(jid)

            threads = [threading.Thread(target=advance), threading.Thread(target=cancel)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(WAIT)
            assert s.engine.wait_idle()
            assert len(runs) == (0 if result["cancelled"] else 1)
            outcomes[result["cancelled"]] += 1
    print(outcomes)
    assert outcomes[True] > 0 and outcomes[False] > 0  # both sides of the race happened


def test_no_claim_after_deschedule_returns():
    """Every 'claimed' event of the job precedes its 'cancelled' event in the store."""
    clock = FakeClock()
    with RecurringJobScheduler(num_workers=2, clock=clock) as s:
        for i in range(ITERATIONS // 2):
            job_id = f"r{i}"
            s.schedule(job_id, lambda: None, 0.5)
            barrier = threading.Barrier(2)
            stop = threading.Event()

            def ticker(barrier=barrier, stop=stop):
                barrier.wait()
                while not stop.is_set():
                    clock.advance(0.5)

            t = threading.Thread(target=ticker)
            t.start()
            barrier.wait()
            assert s.deschedule(job_id) is True
            stop.set()
            t.join(WAIT)
            assert s.engine.wait_idle()
            kinds = [e.kind for e in s.engine.events(10_000) if e.job_id == job_id]
            assert "cancelled" in kinds
            assert "claimed" not in kinds[kinds.index("cancelled") :]


def test_concurrent_upserts_leave_exactly_one_series():
    clock = FakeClock()
    fns = [lambda: None for _ in range(8)]
    with RecurringJobScheduler(num_workers=2, clock=clock) as s:
        for _ in range(50):
            barrier = threading.Barrier(len(fns))

            def upsert(fn, barrier=barrier):
                barrier.wait()
                s.schedule("same", fn, 1)

            threads = [threading.Thread(target=upsert, args=(fn,)) for fn in fns]
            for t in threads:
                t.start()
            for t in threads:
                t.join(WAIT)
            infos = s.engine.jobs()
            assert len(infos) == 1
            store = s.engine.store
            job = store._jobs["same"]
            assert len(job.pending) == 1 and job.spec.target in fns
        start = sum(1 for e in s.engine.events(100_000) if e.kind == "succeeded")
        clock.advance(1)
        assert s.engine.wait_idle()
        assert sum(1 for e in s.engine.events(100_000) if e.kind == "succeeded") == start + 1


def test_schedule_from_many_threads_loses_nothing():
    clock = FakeClock()
    counter = []
    lock = threading.Lock()

    def job():
        with lock:
            counter.append(1)

    with JobScheduler(num_workers=4, clock=clock) as s:
        barrier = threading.Barrier(8)

        def producer():
            barrier.wait()
            for _ in range(250):
                s.schedule(job, 1)

        threads = [threading.Thread(target=producer) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        clock.advance(1)
        assert s.engine.wait_idle(30)
    assert len(counter) == 2000
