"""An outcome whose recording fails once (a connection an outage left dead) is sent
again, so the job is not run a second time after its lease expires."""

from __future__ import annotations

import logging

from scheduler.stores.memory import MemoryStore
from tests.helpers import Recorder
from workers import commits


class FlakyStore(MemoryStore):
    def __init__(self, clock, failures: int) -> None:
        super().__init__(clock)
        self.failures = failures

    def complete(self, claim, result):  # type: ignore[no-untyped-def]
        if self.failures:
            self.failures -= 1
            raise ConnectionError("connection reset by peer")
        return super().complete(claim, result)

    def complete_many(self, done):  # type: ignore[no-untyped-def]
        if self.failures:  # the engine acknowledges successes in batches
            self.failures -= 1
            raise ConnectionError("connection reset by peer")
        return super().complete_many(done)


def test_a_failed_commit_is_retried_and_succeeds(make_engine, clock, caplog, monkeypatch):
    monkeypatch.setattr(commits, "COMMIT_RETRY_PAUSES", (0.0, 0.0, 0.0))
    rec = Recorder(clock)
    eng = make_engine(num_workers=1, store=FlakyStore(clock, failures=2))
    eng.after(rec.job("once"), 0, job_id="j")
    assert rec.wait_for(1)
    assert eng.wait_idle()
    info = eng.get("j")
    assert info.state == "succeeded" and info.runs == 1
    assert sum("retrying" in r.getMessage() for r in caplog.records) == 2


def test_a_commit_that_keeps_failing_is_left_to_the_lease(make_engine, clock, caplog, monkeypatch):
    monkeypatch.setattr(commits, "COMMIT_RETRY_PAUSES", (0.0, 0.0))
    rec = Recorder(clock)
    store = FlakyStore(clock, failures=10)
    eng = make_engine(num_workers=1, store=store)
    eng.after(rec.job("once"), 0, job_id="j")
    assert rec.wait_for(1)
    assert eng.wait_idle()
    assert store.failures == 7  # three tries, then given up
    assert any(r.levelno == logging.ERROR and "run again" in r.getMessage() for r in caplog.records)
    assert eng.get("j").state != "succeeded"
