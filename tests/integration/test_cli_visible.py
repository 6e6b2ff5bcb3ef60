"""Issue 13: failed and finished work is visible: `ls` and `show` (text and --json) name
the task and its arguments; `events --kind` filters by kind."""

from __future__ import annotations

import json

import pytest

from scheduler.client import Client
from scheduler.stores.redis import RedisStore

pytestmark = pytest.mark.redis


@pytest.fixture
def cli(ns_cli):
    return ns_cli  # tests/integration/conftest.py


def test_ls_and_show_name_the_task_and_its_arguments(cli, redis_url, redis_ns):
    with Client(RedisStore(redis_url, redis_ns)) as c:
        c.enqueue("billing.invoice", delay=60, job_id="inv-1", kwargs={"customer": 42})
        c.cancel("never-there")
    listed = cli("ls")
    assert listed.exit_code == 0
    header, row = listed.output.splitlines()[:2]
    assert header.split()[:3] == ["ID", "TASK", "ARGS"]
    assert row.split()[:3] == ["inv-1", "billing.invoice", '{"customer":42}']
    (data,) = json.loads(cli("ls", "--json").output)["jobs"]
    assert data["task"] == "billing.invoice" and data["args"] == {"customer": 42}
    shown = cli("show", "inv-1").output
    assert "task         billing.invoice" in shown and 'arguments    {"customer":42}' in shown
    assert json.loads(cli("show", "inv-1", "--json").output)["args"] == {"customer": 42}


def test_events_kind_filters_recent_events(cli, redis_url, redis_ns):
    with Client(RedisStore(redis_url, redis_ns)) as c:
        for i in range(3):
            c.enqueue("some.task", delay=60, job_id=f"j{i}")
        c.cancel("j1")
    kinds = {e["kind"] for e in json.loads(cli("events", "--json").output)}
    assert {"scheduled", "cancelled"} <= kinds
    only = json.loads(cli("events", "--json", "--kind", "cancelled").output)
    assert [(e["kind"], e["job_id"]) for e in only] == [("cancelled", "j1")]
    both = json.loads(cli("events", "--json", "--kind", "cancelled", "--kind", "scheduled").output)
    assert len(both) == 4


def test_stats_names_a_lane_with_work_that_no_live_replica_serves(cli, redis_url, redis_ns):
    """Jobs enqueued into a lane no replica serves waited without a word (a queue without
    consumers: what operators of Celery or Sidekiq trip over). Replicas now announce their
    lanes; `duetime stats` warns about a lane with work that none of the live ones serves,
    and says nothing when it cannot tell (a live replica that did not announce)."""
    from scheduler.metrics import Metrics
    from scheduler.recorder import Recorder
    from scheduler.stores.redis.reading import console_history

    client = Client(redis_url, namespace=redis_ns)
    client.enqueue("tests.x", delay=0, lane="orphan")
    client.enqueue("tests.x", delay=0, lane="fast")
    store = RedisStore(redis_url, redis_ns)
    try:
        store.redis.set(store.keys.replica("r1"), "1")  # r1 is alive, has not announced
        assert console_history.unserved_lanes(store, ["orphan", "fast"], ["r1"]) == []
        Recorder(Metrics(), store, "r1", workers=6, lanes={"default": 4, "fast": 2}).flush()
        assert console_history.unserved_lanes(store, ["orphan", "fast"], ["r1"]) == ["orphan"]
        out = cli("stats").output
        assert "warning     lane 'orphan' has 1 queued and no live replica serves it" in out
        assert "lane 'fast'" not in out
        assert json.loads(cli("stats", "--json").output)["unserved_lanes"] == ["orphan"]
    finally:
        store.close()


def test_a_reader_that_goes_away_ends_the_command_quietly(redis_url, redis_ns):
    """`duetime events -f | head -1`: once the reader has gone, the next line written
    ended in "error: [Errno 32] Broken pipe" and exit 3 (Redis unreachable). Now: nothing
    on stderr but the follow banner, exit 141 (128 + SIGPIPE)."""
    import os
    import subprocess
    import sys
    import time

    from scheduler.embedded import spawn_tied

    with Client(RedisStore(redis_url, redis_ns)) as c:
        c.enqueue("billing.invoice", delay=60, job_id="first")
        env = dict(os.environ, DUETIME_REDIS_URL=redis_url, DUETIME_NAMESPACE=redis_ns)
        p = spawn_tied(
            [sys.executable, "-m", "scheduler", "events", "-f"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert p.stdout is not None and p.stderr is not None
        assert b"first" in p.stdout.readline()  # the reader takes one line, then goes
        p.stdout.close()
        deadline = time.monotonic() + 30
        while p.poll() is None and time.monotonic() < deadline:
            c.enqueue("billing.invoice", delay=60)  # a new event for the follower to write
            time.sleep(0.05)
        p.kill()  # (a no-op if it ended)
        err = p.stderr.read().decode()
        p.wait()
    assert p.returncode == 141, err
    assert "error" not in err.lower() and "Traceback" not in err, err


def test_counters_say_what_they_count(cli, redis_url, redis_ns):
    """A one-off that failed once read "RUNS 0 FAILURES 1 ... attempts 1": the views name
    runs that succeeded, runs that failed after their retries, and the last attempt."""
    store = RedisStore(redis_url, redis_ns)
    try:
        with Client(store) as client:
            job = client.enqueue("tests.noop", delay=0)
        (c,) = store.claim_due({"default": 1}, 30.0, "r1").claims
        store.fail(c, "boom", retry_in=None)
        ls = cli("ls", "--state", "failed").output.splitlines()
        assert "SUCCEEDED" in ls[0] and "FAILED" in ls[0] and "RUNS" not in ls[0], ls[0]
        shown = cli("show", job).output
        assert "succeeded    0 run(s)" in shown
        assert "failed       1 run(s) (after their retries)" in shown
        assert "last attempt 1" in shown
    finally:
        store.close()
