"""`duetime demo`'s proof holds: a replica is killed mid-run and nothing is lost or doubled."""

from __future__ import annotations

import pytest

from scheduler.cli import demo_shared as demo

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_demo_proves_once_and_takeover(redis_url, redis_client):
    lines: list[str] = []
    before = set(redis_client.scan_iter(match=b"duetime:{demo-*"))
    report = demo.run(redis_url, seconds=4, echo=lines.append)
    # issue 13: the demo leaves nothing behind in a user's Redis (it used to leave ~40 keys)
    assert set(redis_client.scan_iter(match=b"duetime:{demo-*")) == before
    assert report.killed_pid is not None and report.per_pid[report.killed_pid] > 0
    assert report.ok, report
    assert report.in_flight and not (report.lost or report.doubled or report.bad_reruns)
    assert {r["inv"] for r in report.reruns} >= set(report.in_flight)  # each taken over
    assert report.completed == report.invocations >= 24
    assert report.executions == report.invocations + len(report.reruns)
    assert all(r["pid"] != report.killed_pid for r in report.reruns)  # taken over by others
    assert any("killed replica" in line for line in lines)


def test_demo_command_in_process_fallback():
    from click.testing import CliRunner

    from scheduler.cli import main

    out = CliRunner().invoke(main, ["demo", "--in-process", "--seconds", "0.6"])
    assert out.exit_code == 0, out.output
    assert "cancelled job" in out.output and "each at or after its due time" in out.output


def test_demo_without_the_redis_client_falls_back_before_starting_a_server(monkeypatch):
    """With redis-server on PATH but no redis-py (no extras installed), the demo started
    a server, then failed: "the Redis client is not installed" (exit 2)."""
    import sys

    from click.testing import CliRunner

    from scheduler import embedded
    from scheduler.cli import main

    started: list[object] = []
    monkeypatch.setattr(embedded.EmbeddedRedis, "start", lambda self: started.append(self))
    monkeypatch.setitem(sys.modules, "redis", None)  # import redis: ImportError
    monkeypatch.delenv("DUETIME_REDIS_URL", raising=False)
    out = CliRunner().invoke(main, ["demo", "--seconds", "0.6"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("the Redis client is not installed (pip install 'redis[hiredis]")
    assert "showing the in-process engine instead" in out.output and not started


def test_demo_names_the_redis_it_was_given(redis_url, monkeypatch):
    """--redis defaults to $DUETIME_REDIS_URL: the demo says which server it writes to."""
    from click.testing import CliRunner

    from scheduler.cli import main

    monkeypatch.setenv("DUETIME_REDIS_URL", redis_url)
    out = CliRunner().invoke(main, ["demo", "--seconds", "1"])
    assert out.output.startswith(f"using the Redis at {redis_url} (--redis or DUETIME_REDIS_URL)")
