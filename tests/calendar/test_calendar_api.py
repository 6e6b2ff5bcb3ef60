"""Calendar jobs through the public API: validation before anything is written, the
engine and facade on a fake clock, and the CLI over a real Redis."""

from __future__ import annotations

import datetime as dt
import json
import threading

import pytest
from click.testing import CliRunner

from scheduler import Client, Cron, MemoryStore, RecurringJobScheduler, Scheduler
from scheduler.cli import main
from scheduler.testing import FakeClock
from tests.helpers import WAIT

NOON = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.timezone.utc).timestamp()


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * *"}, "cron"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "zone"),
        ({"cron": "* * * * *", "every": 5}, "exactly one"),
        ({"every": 5, "tz": "UTC"}, "tz= only applies to cron="),
        ({"cron": Cron("* * * * *", jitter=-1)}, "jitter"),
        ({"cron": Cron("* * * * *", "UTC"), "tz": "Europe/Paris"}, "contradicts"),
        ({"cron": 5}, "cron must be"),
    ],
)
def test_bad_calendar_input_is_refused_and_nothing_is_written(kw, message):
    store = MemoryStore(FakeClock(NOON))
    client = Client(store)
    with pytest.raises((ValueError, TypeError), match=message):
        client.enqueue("tests.noop", job_id="c", **kw)
    assert store.get("c") is None and store.jobs() == []


def test_the_facade_runs_a_calendar_job_at_its_local_times():
    clock = FakeClock(NOON)  # 14:00 in Paris (CEST)
    ran: list[float] = []
    changed = threading.Condition()

    def job() -> None:
        with changed:
            ran.append(clock.now())
            changed.notify_all()

    with RecurringJobScheduler(num_workers=1, clock=clock) as r:
        r.schedule_cron("half-hourly", job, "0,30 14 * * *", tz="Europe/Paris")
        info = r.engine.get("half-hourly")
        assert info.next_run == NOON + 1800 and "Europe/Paris" in info.schedule
        clock.advance(1800)
        with changed:
            assert changed.wait_for(lambda: len(ran) == 1, WAIT)
        clock.advance(86400 - 1800)  # next day 14:00 local = 12:00 UTC
        with changed:
            assert changed.wait_for(lambda: len(ran) == 2, WAIT)
    assert ran == [NOON + 1800, NOON + 86400]


def test_engine_backfill_runs_missed_occurrences_once(make_engine):
    clock = FakeClock(NOON)
    engine: Scheduler = make_engine(1, clock=clock)
    seen = []
    lock = threading.Condition()

    def job() -> None:
        from scheduler import current_invocation

        with lock:
            seen.append(current_invocation().scheduled_ms)
            lock.notify_all()

    engine.cron(job, "0 * * * *", job_id="hourly")
    assert engine.backfill("hourly", NOON - 3 * 3600, NOON + 1) == 4  # 09:00 .. 12:00
    with lock:
        assert lock.wait_for(lambda: len(seen) == 4, WAIT)
    assert sorted(seen) == [round((NOON - h * 3600) * 1000) for h in (3, 2, 1, 0)]
    assert engine.backfill("hourly", NOON - 3 * 3600, NOON + 1) == 0
    with pytest.raises(ValueError, match="empty"):
        engine.backfill("hourly", NOON, NOON)


@pytest.mark.redis
def test_cli_enqueue_cron_and_backfill(redis_url, redis_ns):
    runner = CliRunner()
    base = ["--redis", redis_url, "-n", redis_ns]
    out = runner.invoke(
        main,
        [
            "enqueue",
            *base,
            "tests.noop",
            "--cron",
            "30 2 * * *",
            "--tz",
            "Europe/Paris",
            "--ambiguous",
            "both",
            "--missing",
            "skip",
            "--jitter",
            "60",
            "--id",
            "nightly",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {"job_id": "nightly"}
    with Client(redis_url, namespace=redis_ns) as client:
        info = client.get("nightly")
    assert info.schedule == "cron '30 2 * * *' Europe/Paris ±jitter 60s"
    assert info.state == "scheduled" and info.next_run is not None
    bad = runner.invoke(main, ["enqueue", *base, "x", "--cron", "nope"])
    assert bad.exit_code == 2 and "cron" in bad.output
    assert runner.invoke(main, ["enqueue", *base, "x", "--in", "1", "--tz", "UTC"]).exit_code == 2
    now = info.next_run
    back = runner.invoke(
        main, ["backfill", *base, "nightly", "--start", str(now - 3 * 86400), "--end", str(now)]
    )
    assert back.exit_code == 0, back.output
    assert "queued 3 run(s)" in back.output
    again = runner.invoke(
        main, ["backfill", *base, "nightly", "--start", str(now - 3 * 86400), "--end", str(now)]
    )
    assert again.exit_code == 1 and "nothing to backfill" in again.output
