"""Human time input (issue 13, bullet 3): ISO 8601 instants and durations, one grammar for
the CLI and for Python's delay/interval strings; a past instant is due now, but more than
24 h back is refused unless allowed; lag counts from when a job became claimable."""

from __future__ import annotations

import datetime as dt
import sys
import threading
import time

import pytest

from scheduler import Client, JobScheduler, RecurringJobScheduler, current_invocation
from scheduler.metrics import Metrics
from scheduler.timeinput import (
    PAST_LIMIT,
    check_past,
    describe,
    iso_utc,
    parse_duration,
    parse_instant,
)
from tests.conftest import START
from tests.helpers import WAIT


@pytest.fixture
def zone(monkeypatch):
    """Set the local zone for one test (TZ + tzset), restored afterwards."""

    def set_zone(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


# ---- durations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90", 90),
        ("1.5", 1.5),
        (".25", 0.25),
        ("90s", 90),
        ("500ms", 0.5),
        ("250us", 0.00025),
        ("1h30m", 5400),
        ("1h 30m", 5400),
        (" 2d ", 172800),
        ("1w", 604800),
        ("1d2h3m4s5ms", 93784.005),
        ("0.1s", 0.1),
        ("PT1H30M", 5400),
        ("PT1H", 3600),
        ("P1DT2H", 93600),
        ("P2W", 1209600),
        ("pt0.5s", 0.5),
        ("PT1,5S", 1.5),
        ("P0Y0M1D", 86400),
        ("0s", 0),
    ],
)
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds, abs=0, rel=1e-15)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "not a duration"),
        ("soon", "not a duration"),
        ("1h30", "not a duration"),
        ("1H", "not a duration"),  # units are lowercase ("M" would read as months)
        ("1 hour", "not a duration"),
        ("nan", "not a duration"),
        ("inf", "not a duration"),
        ("1e3", "not a duration"),
        ("-5s", "must not be negative"),
        ("P", "not an ISO 8601 duration"),
        ("PT", "not an ISO 8601 duration"),
        ("P1DT", "not an ISO 8601 duration"),
        ("P1M", "months or years"),
        ("P1Y", "months or years"),
        ("\u0663", "not a duration"),  # an Arabic-Indic 3: Python's int() reads it; we do not
        ("\u0663s", "not a duration"),
        ("PT\u0663S", "not an ISO 8601 duration"),
    ],
)
def test_what_is_not_a_duration(text, message):
    with pytest.raises(ValueError, match=message) as caught:
        parse_duration(text, "--in")
    assert str(caught.value).startswith("--in")


# ---- instants ----------------------------------------------------------------------------

EPOCH_2025_03_01_1330Z = 1740835800.0


@pytest.mark.parametrize(
    "text",
    [
        "2025-03-01T13:30:00Z",
        "2025-03-01T13:30Z",
        "2025-03-01t13:30z",
        "2025-03-01 13:30:00+00:00",
        "2025-03-01T14:30+01:00",
        "2025-03-01T14:30:00+0100",
        "2025-03-01T14:30+01",
        "2025-03-01T08:30-05:00",
        "20250301T133000Z",
        "20250301T1430+0100",
        "1740835800",
        "2025-03-01T13:30:00.000Z",
        "2025-03-01T13:30:00,0Z",
    ],
)
def test_instants_with_a_zone(text):
    when = parse_instant(text)
    assert when.tzinfo is not None
    assert when.timestamp() == EPOCH_2025_03_01_1330Z


def test_a_time_without_a_zone_is_local_time(zone):
    zone("America/New_York")
    assert parse_instant("2025-07-01T12:00").isoformat() == "2025-07-01T12:00:00-04:00"
    assert parse_instant("2025-01-15T12:00").isoformat() == "2025-01-15T12:00:00-05:00"
    assert parse_instant("2025-01-15").isoformat() == "2025-01-15T00:00:00-05:00"
    zone("Asia/Kolkata")
    assert (
        parse_instant("2025-01-15T12:00").timestamp()
        == parse_instant("2025-01-15T06:30Z").timestamp()
    )


def test_fractions_beyond_the_microsecond_round_up_never_down():
    assert parse_instant("2025-03-01T13:30:00.0000001Z").microsecond == 1
    assert parse_instant("2025-03-01T13:30:00.123456Z").microsecond == 123456
    assert parse_instant("2025-03-01T13:30:59.9999999Z").isoformat() == (
        "2025-03-01T13:31:00+00:00"
    )
    assert parse_instant("1740835800.25").timestamp() == EPOCH_2025_03_01_1330Z + 0.25


@pytest.mark.parametrize(
    "text, message",
    [
        ("tomorrow", "not a time"),
        ("2025-03-01Z", "not a time"),  # a zone needs a time
        ("2025-03-01T", "not a time"),
        ("2025-03-01T14:30 CET", "not a time"),  # zone names are not offsets
        ("2025-W09-6", "not a time"),  # week dates are not supported
        ("2025-13-01", "month must be in 1..12"),
        ("2025-02-30", "day is out of range"),
        ("2025-03-01T24:00", "hour must be in 0..23"),
        ("2025-03-01T14:30+24:00", "offset"),
        ("99999999999999", "out of range"),
        ("-5", "not a time"),
    ],
)
def test_what_is_not_an_instant(text, message):
    with pytest.raises(ValueError, match=message) as caught:
        parse_instant(text, "--at")
    assert str(caught.value).startswith("--at")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="fromisoformat reads these from 3.11")
@pytest.mark.parametrize(
    "text",
    [
        "2025-03-01T13:30:00Z",
        "2025-03-01T14:30:00.25+01:00",
        "2025-03-01T14:30+0100",
        "20250301T143000Z",
        "2025-03-01 14:30:00-05:00",
        "2025-03-01T14:30:00.123456789+05:30",
    ],
)
def test_the_same_reading_as_fromisoformat_where_it_has_one(text):
    ours, theirs = parse_instant(text), dt.datetime.fromisoformat(text)
    assert abs(ours.timestamp() - theirs.timestamp()) < 1e-6


def test_describe_says_utc_local_and_how_far(zone):
    zone("Europe/Berlin")
    now = EPOCH_2025_03_01_1330Z
    assert describe(now + 7200, now) == (
        "2025-03-01T15:30:00Z = 2025-03-01 16:30:00 CET local (in 2 h 0 min)"
    )
    assert describe(now - 90, now).endswith("(1 min ago: due now)")
    assert describe(now - 90, now, due=False).endswith("(1 min ago)")  # a window's bound
    assert describe(now + 90, now, due=False).endswith("(in 1 min)")
    assert iso_utc(now + 0.25) == "2025-03-01T13:30:00.250Z"


def test_check_past_refuses_only_beyond_a_day():
    now = EPOCH_2025_03_01_1330Z
    check_past(now - PAST_LIMIT, now, "at", False, "allow_past=True")  # a day back: fine
    check_past(now - 10 * PAST_LIMIT, now, "at", True, "allow_past=True")
    with pytest.raises(ValueError, match=r"2025-02-27T13:30:00Z is 2 d 0 h in the past.*"):
        check_past(now - 2 * PAST_LIMIT, now, "at", False, "allow_past=True")
    with pytest.raises(ValueError, match=r"pass --allow-past if you mean it"):
        check_past(0, now, "--at", False, "--allow-past")


# ---- durations wherever Python takes a delay or an interval -------------------------------


def test_facades_take_duration_strings(clock):
    runs: list[int] = []
    done = threading.Event()
    with JobScheduler(num_workers=1, clock=clock) as once:
        once.schedule(lambda: runs.append(current_invocation().scheduled_ms), "1.5s")
        once.schedule(done.set, "PT2S")
        clock.advance(1.5)
        assert once.engine.wait_idle()
        assert runs == [round((START + 1.5) * 1000)]
        clock.advance(0.5)
        assert done.wait(WAIT)
    ticks: list[int] = []
    with RecurringJobScheduler(num_workers=1, clock=clock) as rec:
        rec.schedule("t", lambda: ticks.append(current_invocation().scheduled_ms), "500ms")
        for _ in range(2):
            clock.advance(0.5)
            assert rec.engine.wait_idle()
    base = START + 2
    assert ticks == [round((base + 0.5) * 1000), round((base + 1.0) * 1000)]


def test_engine_and_client_take_duration_strings(make_engine, clock):
    engine = make_engine(lease="30s", lane_timeouts={"default": "1m"})
    engine.after(lambda: None, "1h30m", job_id="a")
    engine.every(lambda: None, "PT15M", job_id="b", misfire_grace="10s")
    assert engine.get("a").next_run == START + 5400
    assert engine.get("b").next_run == START + 900
    client = Client(engine.store)
    client.enqueue("tests.noop", delay="2d", job_id="c")
    client.enqueue("tests.noop", every="1w", job_id="d", timeout="90s")
    client.enqueue_many([{"task": "tests.noop", "delay": "45s", "job_id": "e"}])
    assert engine.get("c").next_run == START + 172800
    assert engine.get("d").next_run == START + 604800
    assert engine.get("e").next_run == START + 45
    with pytest.raises(ValueError, match="delay: 'later' is not a duration"):
        client.enqueue("tests.noop", delay="later")
    with pytest.raises(TypeError, match="instant|datetime|number"):
        client.enqueue("tests.noop", at="2030-01-01T00:00Z")  # instants are not strings here
    assert {j.job_id for j in engine.jobs()} == {"a", "b", "c", "d", "e"}


# ---- a past instant ------------------------------------------------------------------------


def test_a_past_instant_is_due_now_and_more_than_a_day_back_needs_allow_past(make_engine, clock):
    clock.advance(3 * 86400)  # the fake wall clock: epoch START + 3 days
    engine = make_engine()
    ran = threading.Event()
    engine.at(ran.set, clock.wall() - 3600, job_id="an-hour-ago")
    assert ran.wait(WAIT)  # due now
    assert engine.wait_idle()  # its outcome recorded (after its body set the event)
    with pytest.raises(ValueError, match=r"in the past.*allow_past=True"):
        engine.at(lambda: None, clock.wall() - 86400 - 1, job_id="too-old")
    with pytest.raises(ValueError, match="allow_past=True"):
        Client(engine.store).enqueue("tests.noop", at=START, job_id="too-old")
    with pytest.raises(ValueError, match="allow_past=True"):
        Client(engine.store).enqueue_many([{"task": "tests.noop", "at": START}])
    assert engine.get("an-hour-ago").runs == 1
    assert {j.job_id for j in engine.jobs()} == set()  # nothing was written
    old = threading.Event()
    engine.at(old.set, START, allow_past=True, job_id="old-on-purpose")
    assert old.wait(WAIT)
    Client(engine.store).enqueue_many(
        [{"task": "tests.noop", "at": START, "allow_past": True, "job_id": "old-too"}]
    )
    assert engine.wait_idle()
    assert engine.get("old-too").runs == 1
    aware = dt.datetime.fromtimestamp(clock.wall() - 2 * 86400, dt.timezone.utc)
    with pytest.raises(ValueError, match="allow_past"):
        engine.at(lambda: None, aware)


class Lags(Metrics):
    def __init__(self) -> None:
        self.seen: list[float] = []

    def claimed(self, lane: str, lag: float) -> None:
        self.seen.append(lag)


def test_lag_counts_from_when_the_job_became_claimable(make_engine, clock):
    """A job enqueued for a time already past (or resumed after its time) is not late:
    its lag counts from the moment it could first be claimed, not from its due time."""
    lags = Lags()
    engine = make_engine(metrics=lags)
    engine.at(lambda: None, clock.wall() - 3600, job_id="past")
    assert engine.wait_idle()
    engine.after(lambda: None, 5, job_id="held")
    engine.pause("held")
    clock.advance(60)  # 55 s past its due time, paused
    engine.resume("held")
    assert engine.wait_idle()
    assert lags.seen == [0.0, 0.0]


def test_lag_still_shows_a_late_dispatch(make_engine, clock):
    lags = Lags()
    engine = make_engine(metrics=lags)
    started, go = threading.Event(), threading.Event()
    engine.after(lambda: (started.set(), go.wait(WAIT)), 0, job_id="blocker")
    assert started.wait(WAIT)
    engine.after(lambda: None, 1, job_id="waits")
    clock.advance(4)  # due at +1, its one worker busy until now
    go.set()
    assert engine.wait_idle()
    assert lags.seen == [0.0, pytest.approx(3.0)]


@pytest.mark.parametrize("epoch", [-62135596800.0, 1e15, -1e15])
def test_describing_an_instant_outside_what_a_datetime_shows_never_fails(epoch):
    """`--at 0001-01-01T00:00:00Z --allow-past` ended in "enqueue: year 0 is out of range"
    (the year 1 in UTC is the year 0 in a zone west of it, or its local rendering failed)."""
    from scheduler import timeinput

    text = timeinput.describe(epoch, 1.8e9)
    assert "epoch" in text or text.startswith("0001-01-01T00:00:00Z"), text
