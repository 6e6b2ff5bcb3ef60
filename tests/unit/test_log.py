"""Structured logs: one JSON line per state change, with the invocation's fields; a
successful job's lines are DEBUG, so the default level (INFO) logs none per job."""

from __future__ import annotations

import json
import logging

from scheduler import RetryPolicy
from scheduler.log import JsonFormatter


def events(caplog) -> list[dict]:
    return [json.loads(JsonFormatter().format(r)) for r in caplog.records if hasattr(r, "event")]


def test_state_changes_are_logged_with_fields(make_engine, clock, caplog):
    eng = make_engine(owner="replica-1")

    def boom():
        raise ValueError("no")

    with caplog.at_level(logging.DEBUG, logger="duetime"):
        eng.after(lambda: None, 1, job_id="ok")
        eng.after(boom, 1, job_id="bad")
        clock.advance(1)
        assert eng.wait_idle()
    lines = events(caplog)
    got = {(line["job_id"], line["event"]) for line in lines}
    assert got == {("ok", "started"), ("ok", "succeeded"), ("bad", "started"), ("bad", "failed")}
    for line in lines:
        assert line["replica"] == "replica-1" and line["attempt"] == 1
        assert line["invocation"].startswith(line["job_id"] + "@")
    failed = next(line for line in lines if line["event"] == "failed")
    assert "ValueError: no" in failed["msg"] and "Traceback" in failed["msg"]
    assert failed["level"] == "ERROR"


def test_info_logs_no_line_per_successful_job(make_engine, clock, caplog):
    """At INFO (``duetime run``'s default) a success writes nothing; a failure, a retry
    (WARNING) and a later attempt's start (a retry or a takeover, INFO) still do."""
    eng = make_engine(owner="replica-1")
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("once")

    with caplog.at_level(logging.INFO, logger="duetime"):
        for i in range(20):
            eng.after(lambda: None, 1, job_id=f"ok{i}")
        eng.after(flaky, 1, job_id="flaky", retry=RetryPolicy(max_attempts=2, backoff=1))
        clock.advance(1)
        assert eng.wait_idle()
        clock.advance(5)
        assert eng.wait_idle()
    assert len(calls) == 2
    got = [(line["job_id"], line["event"], line["level"]) for line in events(caplog)]
    assert got == [("flaky", "retried", "WARNING"), ("flaky", "started", "INFO")]
    assert not [r for r in caplog.records if r.getMessage().startswith("job ok")]
