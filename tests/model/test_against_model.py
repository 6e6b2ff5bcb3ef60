"""The engine against a simple model (hypothesis stateful test).

Random one-off and recurring schedules, upserts, cancels, pauses and clock advances; after
every step the invocations that started must be exactly the ones the model predicts:
none early, none missing, none twice, one-off jobs in (due, submission) order.
"""

from __future__ import annotations

import threading

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from scheduler import JobScheduler, RecurringJobScheduler, current_invocation
from scheduler.schedules import grace_for
from scheduler.testing import FakeClock

DELAYS = st.sampled_from([0, 0.25, 0.5, 1, 1.5, 4])
INTERVALS = st.sampled_from([0.5, 1, 2])
ADVANCES = st.sampled_from([0.25, 0.5, 1, 3, 10])
RECURRING_IDS = st.sampled_from(["r1", "r2", "r3"])


class Model:
    """What should have run: plain lists and dicts, no threads."""

    def __init__(self) -> None:
        self.now = 0.0
        self.seq = 0
        self.once: dict[str, tuple[float, int]] = {}  # id -> (due, seq), pending
        self.series: dict[str, dict] = {}  # id -> anchor, interval, fn, k
        self.started: list[tuple[str, int]] = []

    def advance(self, dt: float) -> None:
        self.now += dt
        for jid, (due, _) in sorted(self.once.items(), key=lambda kv: kv[1]):
            if due <= self.now:
                self.started.append((jid, round(due * 1000)))
                del self.once[jid]
        for jid, s in self.series.items():
            if s["paused"]:
                continue
            grace = grace_for(s["interval"], None)
            while s["anchor"] + s["k"] * s["interval"] <= self.now:
                t = s["anchor"] + s["k"] * s["interval"]
                if self.now - t <= grace:  # on time: runs (misfire=skip otherwise)
                    self.started.append((jid, round(t * 1000)))
                s["k"] += 1


class EngineVsModel(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.clock = FakeClock()
        # one engine per facade: two engines on one store would be two replicas, and FIFO
        # start order is a per-replica promise
        self.once = JobScheduler(num_workers=1, clock=self.clock)
        self.rec = RecurringJobScheduler(num_workers=1, clock=self.clock)
        self.model = Model()
        self.lock = threading.Lock()
        self.started: list[tuple[str, int]] = []
        self.fns: dict[tuple[str, float], object] = {}
        self.once_ids: list[int] = []

    def _record(self) -> None:
        inv = current_invocation()
        assert inv.scheduled_ms <= round(self.clock.now() * 1000)  # never early
        with self.lock:
            self.started.append((inv.job_id, inv.scheduled_ms))

    @rule(delay=DELAYS)
    def schedule_once(self, delay: float) -> None:
        jid = self.once.schedule(self._record, delay)
        self.once_ids.append(jid)
        self.model.once[str(jid)] = (self.model.now + delay, self.model.seq)
        self.model.seq += 1
        self._settle(0)

    @rule(job_id=RECURRING_IDS, interval=INTERVALS)
    def upsert_recurring(self, job_id: str, interval: float) -> None:
        fn = self.fns.setdefault((job_id, interval), lambda: self._record())
        self.rec.schedule(job_id, fn, interval)
        old = self.model.series.get(job_id)
        if old is None or old["fn"] is not fn:
            self.model.series[job_id] = dict(
                anchor=self.model.now, interval=interval, fn=fn, k=1, paused=False
            )

    @rule(job_id=RECURRING_IDS)
    def deschedule(self, job_id: str) -> None:
        expected = self.model.series.pop(job_id, None) is not None
        assert self.rec.deschedule(job_id) is expected

    @rule(data=st.data())
    def cancel_once(self, data: st.DataObject) -> None:
        if not self.once_ids:
            return
        jid = data.draw(st.sampled_from(self.once_ids))
        expected = self.model.once.pop(str(jid), None) is not None
        assert self.once.cancel(jid) is expected

    @rule(job_id=RECURRING_IDS)
    def pause_resume(self, job_id: str) -> None:
        s = self.model.series.get(job_id)
        if s is None:
            assert self.rec.engine.pause(job_id) is False
        elif s["paused"]:
            assert self.rec.engine.resume(job_id) is True
            s["paused"] = False
            grace = grace_for(s["interval"], None)
            while s["anchor"] + s["k"] * s["interval"] < self.model.now - grace:
                s["k"] += 1  # missed while paused: skipped
            self._settle(0)
        else:
            assert self.rec.engine.pause(job_id) is True
            s["paused"] = True

    @rule(dt=ADVANCES)
    def advance(self, dt: float) -> None:
        self._settle(dt)

    def _settle(self, dt: float) -> None:
        """Move both clocks by dt and let the engines run everything now due."""
        if dt:
            self.clock.advance(dt)
        self.model.advance(dt)
        assert self.once.engine.wait_idle() and self.rec.engine.wait_idle()

    @invariant()
    def same_invocations(self) -> None:
        if not hasattr(self, "model"):
            return
        with self.lock:
            got = list(self.started)
        assert sorted(got) == sorted(self.model.started)
        assert len(set(got)) == len(got)  # nothing ran twice
        once_got = [x for x in got if x[0].isdigit()]
        once_want = [x for x in self.model.started if x[0].isdigit()]
        assert once_got == once_want  # one-off jobs in (due, submission) order

    def teardown(self) -> None:
        if hasattr(self, "once"):
            self.once.shutdown()
            self.rec.shutdown()


EngineVsModel.TestCase.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
TestEngineVsModel = EngineVsModel.TestCase
