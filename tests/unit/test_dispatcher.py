"""The dispatcher loop, driven step by step with the fake clock (docs/guarantees.md)."""

from __future__ import annotations

import threading

from scheduler.model import After
from scheduler.stores.memory import MemoryStore
from tests.conftest import START
from tests.helpers import WAIT, Recorder, spec


def test_never_early_and_exactly_on_time(make_engine, clock):
    rec = Recorder(clock)
    eng = make_engine()
    eng.after(rec.job("a"), 5)
    clock.advance(4.999)
    assert eng.wait_idle()
    assert rec.labels() == []
    clock.advance(0.001)
    assert rec.wait_for(1)
    assert rec.starts == [("a", START + 5)]


def test_equal_due_times_start_in_submission_order(make_engine, clock):
    rec = Recorder(clock)
    eng = make_engine(num_workers=1)
    labels = [f"j{i}" for i in range(20)]
    for label in labels:
        eng.after(rec.job(label), 1)
    clock.advance(1)
    assert rec.wait_for(20)
    assert rec.labels() == labels


def test_when_workers_are_busy_due_jobs_wait_in_due_order(make_engine, clock):
    rec = Recorder(clock)
    gate = threading.Event()
    eng = make_engine(num_workers=1)
    eng.after(rec.job("blocker", lambda: gate.wait(WAIT)), 0)
    assert rec.wait_for(1)
    eng.after(rec.job("third"), 3)
    eng.after(rec.job("first"), 1)
    eng.after(rec.job("second"), 2)
    clock.advance(5)
    assert eng._dispatcher.wait_quiet(WAIT)
    assert rec.labels() == ["blocker"]
    assert sorted(j.state for j in eng.jobs()) == ["running"] + ["scheduled"] * 3
    gate.set()
    assert rec.wait_for(4)
    assert rec.labels() == ["blocker", "first", "second", "third"]


def test_an_earlier_job_wakes_the_sleeping_dispatcher(make_engine, clock):
    rec = Recorder(clock)
    eng = make_engine()
    eng.after(rec.job("late"), 100)
    assert eng.wait_idle()  # parked until t+100 on the fake clock
    eng.after(rec.job("early"), 1)  # must wake it, or advance(1) would not run "early"
    clock.advance(1)
    assert rec.wait_for(1)
    assert rec.labels() == ["early"]


def test_wake_from_another_engine_sharing_the_store(clock, make_engine):
    store = MemoryStore(clock)
    rec = Recorder(clock)
    runner = make_engine(store=store)
    producer = make_engine(store=store, lanes={"other": 1})
    producer.shutdown()  # a producer that runs nothing: only the store connects them
    runner.after(rec.job("late"), 50)
    assert runner.wait_idle()
    store.add(spec("early", After(2)))
    clock.advance(2)
    assert runner.wait_idle()
    assert store.get("early").runs == 1


def test_no_wakeups_when_idle_or_for_later_jobs(make_engine, clock):
    eng = make_engine()
    eng.after(lambda: None, 3600)
    assert eng.wait_idle()
    rounds = eng._dispatcher.rounds
    for i in range(1000):  # later than what it waits for: no wake-up
        eng.after(lambda: None, 3600 + i)
    clock.advance(3599)  # time passing short of the deadline: no wake-up
    assert eng.wait_idle()
    assert eng._dispatcher.rounds == rounds
    assert clock.sleepers() >= 1


def test_claims_are_bounded_by_free_workers(make_engine, clock):
    gate = threading.Event()
    started = threading.Semaphore(0)

    def blocked() -> None:
        started.release()
        gate.wait(WAIT)

    eng = make_engine(num_workers=2)
    for _ in range(5):
        eng.after(blocked, 0)
    assert started.acquire(timeout=WAIT) and started.acquire(timeout=WAIT)
    assert len(eng.running()) == 2
    assert sum(1 for j in eng.jobs() if j.state == "scheduled") == 3
    gate.set()
    assert eng.wait_idle()
    assert eng.jobs() == []  # all five ran and were retired
    assert sum(1 for e in eng.events() if e.kind == "succeeded") == 5


def test_user_code_never_runs_on_the_dispatcher_thread(make_engine, clock):
    names = []
    eng = make_engine(num_workers=3)
    for _ in range(3):
        eng.after(lambda: names.append(threading.current_thread().name), 0)
    assert eng.wait_idle()
    assert len(names) == 3
    assert all(n.startswith("duetime-default-") for n in names)


def test_the_loop_outlives_a_failing_store_and_backs_off(make_engine, clock, monkeypatch):
    from scheduler.stores.memory import MemoryStore

    store = MemoryStore(clock)
    calls = []
    real = store.claim_due

    def flaky(*args, **kw):
        calls.append(clock.now())
        if len(calls) <= 2:
            raise ConnectionError("store down")
        return real(*args, **kw)

    monkeypatch.setattr(store, "claim_due", flaky)
    rec = Recorder(clock)
    eng = make_engine(store=store)
    eng.after(rec.job("a"), 0)
    for step in (0.05, 0.1):  # the back-off doubles: 50 ms, then 100 ms
        assert eng._dispatcher.wait_quiet(WAIT)  # parked until its back-off ends
        clock.advance(step)
    assert rec.wait_for(1)
    assert len(calls) >= 3 and eng._dispatcher._thread.is_alive()


def test_the_next_wake_counts_from_the_reply_not_from_after_the_hand_off(clock):
    """A store answers "the next job is due in 10 ms"; handing the batch over then takes 4
    ms. The dispatcher claims again 10 ms after the reply, not 14 ms (a late wake is lag
    for every job of a steady trickle)."""
    from scheduler.dispatcher import Dispatcher
    from scheduler.model import Claim, ClaimBatch

    t0, calls, again = clock.now(), [], threading.Event()
    one = Claim("a", t0, 1, "t:1", 1, None, spec("a"), 1, "default")

    class Store:
        def claim_due(self, capacity, lease, owner):
            calls.append(clock.now())
            if len(calls) > 1:
                again.set()
                return ClaimBatch([], None)
            return ClaimBatch([one], 0.010)

    d = Dispatcher(
        Store(),  # type: ignore[arg-type]
        clock,
        capacity=lambda: {"default": 1},
        submit=lambda claims, asked: clock.advance(0.004),  # a slow hand-off
        lease=None,
        owner="t",
    )
    d.start()
    try:
        assert d.wait_quiet(WAIT) and calls == [t0]
        clock.advance(0.0059)  # t0 + 9.9 ms: not yet
        assert d.wait_quiet(WAIT) and len(calls) == 1
        clock.advance(0.0001)  # t0 + 10 ms: the next job is due
        assert again.wait(WAIT) and calls[1] == t0 + 0.010
    finally:
        d.close()


def test_a_store_on_the_same_clock_sets_when_the_next_wake_counts_from(clock):
    """A store that reads the engine's own clock (in process; a test clock) says when its
    "next due in 10 s" counts from. A test clock advanced by 10 s while the claim is in
    flight must not push the wake to 20 s: the job due at 10 s is claimed at once."""
    from scheduler.dispatcher import Dispatcher
    from scheduler.model import ClaimBatch

    t0, calls, again = clock.now(), [], threading.Event()

    class Store:
        def __init__(self) -> None:
            self.clock = clock

        def claim_due(self, capacity, lease, owner):
            calls.append(clock.now())
            if len(calls) > 1:
                again.set()
                return ClaimBatch([], None)
            now = clock.now()
            clock.advance(10)  # the test's advance lands while the reply is on its way
            return ClaimBatch([], 10.0, now, since=now)

    d = Dispatcher(
        Store(),  # type: ignore[arg-type]
        clock,
        capacity=lambda: {"default": 1},
        submit=lambda claims, asked: None,
        lease=None,
        owner="t",
    )
    d.start()
    try:
        assert again.wait(WAIT) and calls == [t0, t0 + 10]
    finally:
        d.close()


def test_the_loop_state_transitions():
    """LoopState's named transitions: why a round starts, what a freed worker leaves,
    and that a close is never undone by a round that ends after it."""
    from scheduler.dispatcher import LoopState, Phase, Round

    st = LoopState()
    st.start_round()  # the first round claims at once
    assert (st.phase, st.reason, st.woken) == (Phase.CLAIMING, Round.WOKEN, False)
    st.note_freed()
    assert st.end_round(starved=True, deadline=5.0, again=False) is False  # a round follows
    assert st.woken and st.phase is Phase.AWAKE
    st.start_round()
    st.note_freed()
    assert st.end_round(starved=False, deadline=5.0, again=True) is True  # none follows
    assert not st.woken and st.deadline_round is Round.AGAIN
    st.start_round()
    assert st.reason is Round.AGAIN
    st.end_round(starved=False, deadline=9.0, again=False)
    st.park()
    assert st.quiet(now=8.0) and not st.quiet(now=9.0)
    st.unpark()
    st.start_round()
    assert st.reason is Round.DUE
    st.close()
    st.end_round(starved=False, deadline=None, again=False)
    st.park()
    st.unpark()
    assert st.phase is Phase.CLOSED and st.quiet(now=0.0)
