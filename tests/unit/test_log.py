"""Structured logs: one JSON line per state change, with the invocation's fields."""

from __future__ import annotations

import json
import logging

from scheduler.log import JsonFormatter


def test_state_changes_are_logged_with_fields(make_engine, clock, caplog):
    eng = make_engine(owner="replica-1")

    def boom():
        raise ValueError("no")

    with caplog.at_level(logging.INFO, logger="duetime"):
        eng.after(lambda: None, 1, job_id="ok")
        eng.after(boom, 1, job_id="bad")
        clock.advance(1)
        assert eng.wait_idle()
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records if hasattr(r, "event")]
    got = {(line["job_id"], line["event"]) for line in lines}
    assert got == {("ok", "started"), ("ok", "succeeded"), ("bad", "started"), ("bad", "failed")}
    for line in lines:
        assert line["replica"] == "replica-1" and line["attempt"] == 1
        assert line["invocation"].startswith(line["job_id"] + "@")
    failed = next(line for line in lines if line["event"] == "failed")
    assert "ValueError: no" in failed["msg"] and "Traceback" in failed["msg"]
