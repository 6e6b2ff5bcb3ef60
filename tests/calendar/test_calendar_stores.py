"""Calendar (cron) series in every store, driven directly with a fake clock set near real
daylight-saving changes. Expected instants are written out in UTC by hand.

Europe/Paris, 2026: clocks go forward on 29 March at 01:00 UTC (02:00 CET -> 03:00 CEST)
and back on 25 October at 01:00 UTC (03:00 CEST -> 02:00 CET).
"""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler.model import Ambiguous, Cron, Misfire, Missing
from scheduler.testing import FakeClock
from tests.helpers import spec

ALL = {"default": 100}


def utc(*args: int) -> float:
    return dt.datetime(*args, tzinfo=dt.timezone.utc).timestamp()


AUTUMN_EVE = utc(2026, 10, 24, 12, 0)
SPRING_EVE = utc(2026, 3, 28, 12, 0)
MINUTE = utc(2026, 6, 1, 12, 0)  # a quiet day: no change anywhere near


@pytest.fixture
def clock(request: pytest.FixtureRequest) -> FakeClock:
    return FakeClock(start=getattr(request, "param", AUTUMN_EVE))


def drain(store, lease=None):
    """Claim until two claim calls in a row return nothing (a Redis calendar series may
    need one call to have a replica plan it and the next to claim what was planned)."""
    out: list = []
    empty = 0
    while empty < 2:
        batch = store.claim_due(ALL, lease, "owner-1")
        empty = 0 if batch.claims else empty + 1
        out.extend(batch.claims)
        for c in batch.claims:
            store.complete(c, None)
    return out


def run_until(store, clock, end, step=60.0):
    """Advance the clock in steps up to ``end``, claiming and completing what is due;
    returns the scheduled instants that ran."""
    ran = []
    while clock.now() < end:
        clock.advance(min(step, end - clock.now()))
        ran += [c.scheduled for c in drain(store)]
    return ran


def paris(expr, **kw):
    return Cron(expr, "Europe/Paris", **kw)


def test_runs_at_each_occurrence_and_never_before(store, clock):
    store.add(spec("c", paris("0 14 * * *")))  # 14:00 CEST = 12:00 UTC
    assert drain(store) == []
    clock.advance(utc(2026, 10, 25, 13, 0) - clock.now() - 0.001)  # CET now: 14:00 = 13:00 UTC
    assert drain(store) == []
    clock.advance(0.001)
    assert [c.scheduled for c in drain(store)] == [utc(2026, 10, 25, 13, 0)]
    info = store.get("c")
    assert info.state == "scheduled" and info.next_run == utc(2026, 10, 26, 13, 0)


@pytest.mark.parametrize(
    "policy, expected",
    [
        (Ambiguous.FIRST, [utc(2026, 10, 25, 0, 30)]),
        (Ambiguous.LAST, [utc(2026, 10, 25, 1, 30)]),
        (Ambiguous.BOTH, [utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30)]),
    ],
)
def test_a_local_time_that_occurs_twice_follows_the_policy(store, clock, policy, expected):
    store.add(spec("c", paris("30 2 * * *", ambiguous=policy)))
    ran = run_until(store, clock, utc(2026, 10, 25, 4, 0))
    assert ran == expected


@pytest.mark.parametrize("clock", [SPRING_EVE], indirect=True)
@pytest.mark.parametrize(
    "policy, expected",
    [
        (Missing.SHIFT, [utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]),  # 03:00 CEST
        (Missing.SKIP, [utc(2026, 3, 30, 0, 30)]),
    ],
)
def test_a_local_time_that_does_not_exist_follows_the_policy(store, clock, policy, expected):
    store.add(spec("c", paris("30 2 * * *", missing=policy)))
    ran = run_until(store, clock, utc(2026, 3, 30, 1, 0), step=900)
    assert ran == expected


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_misfire_skip_runs_the_first_on_time_occurrence(store, clock):
    store.add(spec("c", Cron("* * * * *")))  # every minute, on the minute
    clock.advance(10 * 60 + 30)  # 12:10:30; 12:01 .. 12:10 were due
    (run,) = drain(store)
    assert run.scheduled == utc(2026, 6, 1, 12, 10)  # in its grace
    (skip,) = store.get("c").skipped
    assert (skip.first, skip.last, skip.count, skip.reason) == (
        utc(2026, 6, 1, 12, 1),
        utc(2026, 6, 1, 12, 9),
        9,
        "misfire",
    )
    assert run.skipped == skip  # told to the run (over Redis: planned by a replica first)


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_an_occurrence_skipped_alone_is_told_to_the_next_run(store, clock):
    store.add(spec("c", Cron("* * * * *"), misfire_grace=10))
    clock.advance(90)  # 12:01:30: 12:01 is past its grace, 12:02 not due (decided in Lua)
    assert drain(store) == []
    clock.advance(30)
    (run,) = drain(store)
    assert run.scheduled == utc(2026, 6, 1, 12, 2)
    assert run.skipped == store.get("c").skipped[0]
    assert (run.skipped.first, run.skipped.count) == (utc(2026, 6, 1, 12, 1), 1)


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_misfire_skip_records_the_missed_and_waits_for_the_next(store, clock):
    store.add(spec("c", Cron("* * * * *"), misfire_grace=10))
    clock.advance(10 * 60 + 30)  # 12:10:30; 12:01 .. 12:10 were due
    ran = [c.scheduled for c in drain(store)]
    assert ran == []  # none is within the 10 s grace
    info = store.get("c")
    assert info.next_run == utc(2026, 6, 1, 12, 11)
    (skip,) = info.skipped
    assert (skip.first, skip.last, skip.count, skip.reason) == (
        utc(2026, 6, 1, 12, 1),
        utc(2026, 6, 1, 12, 10),
        10,
        "misfire",
    )


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_misfire_run_once_coalesces_into_the_latest(store, clock):
    store.add(spec("c", Cron("* * * * *"), misfire=Misfire.RUN_ONCE))
    clock.advance(10 * 60 + 30)
    assert [c.scheduled for c in drain(store)] == [utc(2026, 6, 1, 12, 10)]
    (skip,) = store.get("c").skipped
    assert (skip.first, skip.last, skip.count, skip.reason) == (
        utc(2026, 6, 1, 12, 1),
        utc(2026, 6, 1, 12, 9),
        9,
        "coalesced",
    )


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_catch_up_runs_each_missed_one_inside_its_window(store, clock):
    store.add(spec("c", Cron("* * * * *"), misfire=Misfire.CATCH_UP, catch_up_window=200))
    clock.advance(10 * 60 + 30)  # window reaches back to 12:07:10
    runs = drain(store)
    assert [c.scheduled for c in runs] == [utc(2026, 6, 1, 12, m) for m in (8, 9, 10)]
    (skip,) = store.get("c").skipped
    assert [c.skipped for c in runs] == [skip, None, None]  # told once, to the first
    assert (skip.first, skip.last, skip.count, skip.reason) == (
        utc(2026, 6, 1, 12, 1),
        utc(2026, 6, 1, 12, 7),
        7,
        "catch-up-window",
    )


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_catch_up_without_a_window_runs_every_missed_one(store, clock):
    store.add(spec("c", Cron("* * * * *"), misfire=Misfire.CATCH_UP))
    clock.advance(5 * 60 + 30)
    assert [c.scheduled for c in drain(store)] == [utc(2026, 6, 1, 12, m) for m in range(1, 6)]
    assert store.get("c").skipped == ()


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_pause_and_resume_apply_the_misfire_policy(store, clock):
    store.add(spec("c", Cron("*/5 * * * *")))
    assert store.pause("c")
    assert run_until(store, clock, utc(2026, 6, 1, 12, 31)) == []
    assert store.resume("c")
    ran = run_until(store, clock, utc(2026, 6, 1, 12, 36))
    assert ran == [utc(2026, 6, 1, 12, 35)]
    (skip,) = store.get("c").skipped
    assert (skip.first, skip.last, skip.count) == (
        utc(2026, 6, 1, 12, 5),
        utc(2026, 6, 1, 12, 30),
        6,
    )


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_six_fields_have_seconds_first_and_upsert_keeps_the_series(store, clock):
    s = spec("c", Cron("*/20 * * * * *"))
    assert store.add(s).outcome == "created"
    assert run_until(store, clock, MINUTE + 61, step=1) == [MINUTE + x for x in (20, 40, 60)]
    assert store.add(s).outcome == "unchanged"
    assert store.get("c").next_run == MINUTE + 80


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_jitter_is_deterministic_and_stays_before_the_next_occurrence(store, clock):
    store.add(spec("j1", Cron("* * * * *", jitter=50)))
    store.add(spec("j2", Cron("* * * * *", jitter=50)))
    ran = run_until(store, clock, MINUTE + 5 * 60 + 59, step=1)
    assert len(ran) == 12  # 12:00 .. 12:05 for each job (12:00 + jitter is still ahead)
    offsets = {round(x - MINUTE) % 60 for x in ran}
    assert all(0 <= o < 50 for o in offsets)
    assert len(offsets) == 2  # one offset per job, not per run


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_a_running_occurrence_follows_the_overlap_policy(store, clock):
    store.add(spec("c", Cron("* * * * *")))  # overlap=skip by default
    clock.advance(60)
    (first,) = store.claim_due(ALL, None, "owner-1").claims
    clock.advance(60)
    assert drain(store) == []  # 12:02 is skipped: 12:01 still runs
    store.complete(first, None)
    (skip,) = store.get("c").skipped
    assert (skip.first, skip.count, skip.reason) == (utc(2026, 6, 1, 12, 2), 1, "overlap")
    assert run_until(store, clock, MINUTE + 181) == [utc(2026, 6, 1, 12, 3)]


# ---- backfill and trigger -------------------------------------------------------------


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_backfill_runs_what_never_ran_and_nothing_twice(store, clock):
    store.add(spec("c", Cron("*/10 * * * *"), misfire_grace=5))
    ran = run_until(store, clock, MINUTE + 21 * 60)  # 12:10, 12:20 ran
    assert ran == [utc(2026, 6, 1, 12, 10), utc(2026, 6, 1, 12, 20)]
    assert store.pause("c")
    run_until(store, clock, MINUTE + 51 * 60)
    assert store.resume("c")
    assert drain(store) == []  # 12:30 .. 12:50 skipped
    window = (utc(2026, 6, 1, 11, 30), utc(2026, 6, 1, 13, 0))
    # before the series (11:30 .. 12:00) and skipped (12:30 .. 12:50); not 12:10, 12:20
    # (they ran) and not 13:00 (outside the window, and the series' own pending one)
    assert store.backfill("c", *window) == 7
    expected = [
        utc(2026, 6, 1, h, m)
        for h, m in ((11, 30), (11, 40), (11, 50), (12, 0), (12, 30), (12, 40), (12, 50))
    ]
    claims = drain(store)
    assert sorted(c.scheduled for c in claims) == expected
    assert {c.attempt for c in claims} == {1}
    assert store.backfill("c", *window) == 0  # each was queued once
    assert store.get("c").next_run == utc(2026, 6, 1, 13, 0)


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_backfill_refuses_one_off_jobs_and_huge_windows(store, clock):
    from scheduler.model import After

    store.add(spec("once", After(60)))
    with pytest.raises(ValueError, match="not recurring"):
        store.backfill("once", MINUTE - 3600, MINUTE)
    store.add(spec("sec", Cron("* * * * * *")))
    with pytest.raises(ValueError, match="narrower window"):
        store.backfill("sec", MINUTE - 86400, MINUTE)
    assert store.backfill("nobody", MINUTE - 60, MINUTE) == 0
    assert drain(store) == []


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_backfill_of_a_fixed_rate_job_uses_its_grid(store, clock):
    from scheduler.model import Every

    store.add(spec("e", Every(60, anchor=MINUTE - 150)))  # k >= 0: from 11:57:30, each minute
    assert store.backfill("e", MINUTE - 200, MINUTE + 10) == 3
    assert sorted(c.scheduled for c in drain(store)) == [MINUTE - 150, MINUTE - 90, MINUTE - 30]


@pytest.mark.parametrize("clock", [MINUTE], indirect=True)
def test_trigger_runs_a_calendar_job_now_without_moving_its_schedule(store, clock):
    store.add(spec("c", Cron("0 * * * *")))
    clock.advance(5)
    assert store.trigger("c")
    assert [c.scheduled for c in drain(store)] == [MINUTE + 5]
    assert store.get("c").next_run == utc(2026, 6, 1, 13, 0)
