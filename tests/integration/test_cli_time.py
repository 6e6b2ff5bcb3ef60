"""Time on the command line (issue 13, bullet 3): ``--at``/``--start``/``--end``/``--anchor``
take ISO 8601 instants (local time without an offset) or epoch seconds and are echoed as
understood; ``--in``/``--every``/``--jitter`` take durations; bad input is one line, exit 2,
nothing written; more than 24 h in the past needs ``--allow-past``."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from scheduler import Client
from scheduler.cli import main

UNREACHABLE = "redis://127.0.0.1:1/0"  # exit 3 if a command ever got as far as Redis


@pytest.fixture
def zone(monkeypatch):
    def set_zone(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


def run(*argv: str):
    return CliRunner().invoke(main, list(argv))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["enqueue", "t", "--at", "tomorrow"], "--at: 'tomorrow' is not a time; examples: "),
        (["enqueue", "t", "--at", "2025-02-30T10:00"], "day is out of range"),
        (["enqueue", "t", "--at", "2020-01-01T00:00Z"], "pass --allow-past if you mean it"),
        (["enqueue", "t", "--at", "1000"], "in the past"),  # 1970: a likely mistake
        (["enqueue", "t", "--in", "1x"], "--in: '1x' is not a duration"),
        (["enqueue", "t", "--in", "-5s"], "--in must not be negative"),
        (["enqueue", "t", "--every", "P1M"], "months or years"),
        (["enqueue", "t", "--every", "5", "--anchor", "noon"], "--anchor: 'noon' is not a time"),
        (["enqueue", "t", "--cron", "* * * * *", "--jitter", "lots"], "--jitter"),
        (["backfill", "j", "--start", "yesterday", "--end", "2030-01-01"], "--start"),
        (["backfill", "j", "--start", "2030-01-01", "--end", "2030-13-01"], "--end"),
    ],
)
def test_bad_time_input_is_one_line_and_exit_2_before_anything_is_written(argv, message):
    result = run(*argv, "--redis", UNREACHABLE)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert "Traceback" not in result.output


def test_help_names_the_accepted_forms():
    out = run("enqueue", "--help").output
    assert "--at TIME" in out and "--in, --delay DURATION" in out and "--allow-past" in out
    assert "2030-03-01T14:30" in out and "1h30m" in out
    assert "--start TIME" in run("backfill", "--help").output


@pytest.mark.redis
def test_an_iso_local_time_is_stored_as_that_instant_and_echoed(redis_url, redis_ns, zone):
    zone("Asia/Tokyo")  # UTC+9, no daylight saving
    result = run("enqueue", "tests.noop", "--at", "2030-01-01T09:00", "--id", "t1",
                 "--redis", redis_url, "-n", redis_ns)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "t1"
    assert result.stderr.startswith(
        "--at 2030-01-01T09:00 read as 2030-01-01T00:00:00Z = 2030-01-01 09:00:00 JST local (in "
    )
    with Client(redis_url, namespace=redis_ns) as c:
        assert c.get("t1").next_run == 1893456000.0  # 2030-01-01T00:00:00Z


@pytest.mark.redis
def test_durations_and_offsets(redis_url, redis_ns):
    common = ["--redis", redis_url, "-n", redis_ns]
    before = time.time()
    assert run("enqueue", "tests.noop", "--in", "1h30m", "--id", "d1", *common).exit_code == 0
    assert run("enqueue", "tests.noop", "--every", "PT10M", "--id", "d2", *common).exit_code == 0
    r = run("enqueue", "tests.noop", "--at", "2030-06-01T12:00+02:00", "--id", "d3", *common)
    assert r.exit_code == 0 and "2030-06-01T10:00:00Z" in r.stderr
    r = run("enqueue", "tests.noop", "--every", "1h", "--anchor", "2030-01-01T00:00Z",
            "--id", "d4", *common)  # fmt: skip
    assert r.exit_code == 0 and "--anchor 2030-01-01T00:00Z read as 2030" in r.stderr
    after = time.time()
    with Client(redis_url, namespace=redis_ns) as c:
        assert before + 5400 - 1 <= c.get("d1").next_run <= after + 5400 + 1
        assert before + 600 - 1 <= c.get("d2").next_run <= after + 600 + 1
        assert c.get("d3").next_run == 1906538400.0  # 2030-06-01T10:00Z
        assert c.get("d4").next_run % 3600 == 0


@pytest.mark.redis
def test_the_past_is_due_now_and_further_than_a_day_needs_allow_past(redis_url, redis_ns):
    common = ["--redis", redis_url, "-n", redis_ns]
    hour_ago = str(round(time.time() - 3600))
    r = run("enqueue", "tests.noop", "--at", hour_ago, "--id", "p1", *common)
    assert r.exit_code == 0 and "ago: due now" in r.stderr
    old = str(round(time.time() - 3 * 86400))
    assert run("enqueue", "tests.noop", "--at", old, "--id", "p2", *common).exit_code == 2
    with Client(redis_url, namespace=redis_ns) as c:
        assert {j.job_id for j in c.jobs()} == {"p1"}
    r = run("enqueue", "tests.noop", "--at", old, "--allow-past", "--id", "p2", *common)
    assert r.exit_code == 0, r.output
    with Client(redis_url, namespace=redis_ns) as c:
        assert c.get("p2").state == "scheduled"


@pytest.mark.redis
def test_backfill_takes_iso_windows(redis_url, redis_ns):
    common = ["--redis", redis_url, "-n", redis_ns]
    with Client(redis_url, namespace=redis_ns) as c:
        c.enqueue("tests.noop", every=3600, anchor=0, job_id="hourly")
    r = run("backfill", "hourly", "--start", "2020-01-01T00:00Z", "--end", "2020-01-01T03:00Z",
            *common)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "--start 2020-01-01T00:00Z read as 2020-01-01T00:00:00Z" in r.stderr
    assert "queued 3 run(s)" in r.stdout
