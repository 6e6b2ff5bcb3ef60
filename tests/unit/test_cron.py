"""scheduler.cron: validation, 6-field expressions, jitter bounds and determinism."""

from __future__ import annotations

import datetime as dt
import itertools
import math
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import cron, cron_rules
from scheduler.model import Ambiguous, Cron, Missing

UTC = dt.timezone.utc


def z(s: str) -> float:
    return dt.datetime.fromisoformat(s).replace(tzinfo=UTC).timestamp()


# ---- validate ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "c, message",
    [
        (Cron("* * * *"), "has 4 fields; use 5 fields"),
        (Cron("0 0 * * * * 2030"), "7 fields: a year column is not supported"),
        (Cron("61 * * * *"), "invalid cron expression '61 \\* \\* \\* \\*'"),
        (Cron("0 0 * * mon *"), "invalid cron expression"),
        (Cron("@reboot"), "invalid cron expression"),
        (Cron(""), "cron expression '' has 0 fields"),  # was "has 1 fields"
        (Cron("  "), "cron expression '' has 0 fields"),
        (Cron("H * * * *"), "hashed/random fields"),
        (Cron("0 R(1-5) * * *"), "hashed/random fields"),
        (Cron("0 5-5 * * *"), "range whose ends are one value .* as the whole field"),
        (Cron("0 0 * jan-jan *"), "range whose ends are one value"),
        # the same value spelt twice ways: croniter read each as '*' (hourly became minutely)
        (Cron("05-5 * * * *"), "range whose ends are one value"),
        (Cron("0 9 * * sun-0"), "range whose ends are one value"),
        (Cron("0 9 * jan-1 *"), "range whose ends are one value"),
        (Cron("0 9 * * 1-mon"), "range whose ends are one value"),
        (Cron("5 05-5/2 * * * *"), "range whose ends are one value"),
        (Cron("0 0 30 2 *"), "'0 0 30 2 \\*' never fires"),
        (Cron("0 0 31 4,6,9,11 *"), "never fires"),
        (Cron("* * * * *", tz="Mars/Olympus_Mons"), "unknown IANA time zone 'Mars/Olympus_Mons'"),
        (Cron("* * * * *", tz="Europe"), "unknown IANA time zone"),
        (Cron("* * * * *", tz="../etc/passwd"), "unknown IANA time zone"),
        # each host's own: replicas on two hosts would plan two schedules
        (Cron("* * * * *", tz="localtime"), "'localtime' is this host's own file"),
        (Cron("* * * * *", tz="posixrules"), "is this host's own file"),
        (Cron("* * * * *", tz="right/Europe/Paris"), "is this host's own file"),
        (Cron("* * * * *", ambiguous="sometimes"), "Cron.ambiguous must be one of"),  # type: ignore
        (Cron("* * * * *", missing="later"), "Cron.missing must be one of"),  # type: ignore
        (Cron("* * * * *", jitter=-1), "Cron.jitter must be a finite number of seconds >= 0"),
        (Cron("* * * * *", jitter=math.nan), "Cron.jitter"),
        (Cron("* * * * *", jitter=math.inf), "Cron.jitter"),
        (Cron("* * * * *", jitter=True), "Cron.jitter"),
        (Cron("* * * * *", jitter="5"), "Cron.jitter"),  # type: ignore
    ],
)
def test_validate_says_what_to_fix(c, message):
    with pytest.raises(ValueError, match=message):
        cron_rules.validate(c)


@pytest.mark.parametrize(
    "expr", ["0 9 * * 0-7", "0 9 * * sun-7", "0 9 1-31 * *", "0 9 * * mon-fri"]
)
def test_ranges_of_several_values_are_kept(expr):
    cron_rules.validate(Cron(expr))


def test_validate_normalises():
    got = cron_rules.validate(
        Cron("  */5\t1-3  * *   mon-fri ", "Europe/Paris", "both", "skip", jitter=5)
    )  # type: ignore[arg-type]
    assert got == Cron("*/5 1-3 * * mon-fri", "Europe/Paris", Ambiguous.BOTH, Missing.SKIP, 5.0)
    assert type(got.jitter) is float and got.ambiguous is Ambiguous.BOTH
    assert cron_rules.validate(got) == got


@pytest.mark.parametrize(
    "expr",
    [
        "@daily",
        "@hourly",
        "0 0 29 2 *",
        "0 9 * * mon-fri",
        "0 0 L * *",
        "0 0 * * 1#2",
        "*/10 * * * * *",
    ],
)
def test_validate_accepts(expr):
    assert cron_rules.validate(Cron(expr)).expr == expr


def test_six_fields_put_seconds_first():
    every10 = cron_rules.validate(Cron("*/10 * * * * *"))
    assert cron.next_after(every10, 1_000_000_000.5, "j") == 1_000_000_010
    assert list(cron.occurrences(every10, 1_000_000_000, 1_000_000_030, "j")) == [
        1_000_000_000,
        1_000_000_010,
        1_000_000_020,
    ]
    at = cron_rules.validate(Cron("30 0 12 * * *", "Europe/Paris"))  # 12:00:30 Paris (+1 in Jan)
    assert cron.next_after(at, z("2026-01-05T00:00"), "j") == z("2026-01-05T11:00:30")


def test_edges_of_the_api():
    c = cron_rules.validate(Cron("0 * * * *"))
    assert list(cron.occurrences(c, 7200.0, 7200.0, "j")) == []
    assert list(cron.occurrences(c, 7200.0, 3600.0, "j")) == []
    assert list(cron.occurrences(c, 3600.0, 7200.5, "j")) == [3600.0, 7200.0]
    assert list(cron.occurrences(c, 3600.0, 3600.5, "j")) == [3600.0]
    assert next(cron.occurrences(c, 3600.5, math.inf, "j")) == 7200.0
    for bad in (math.nan, math.inf, z("1899-12-31T23:00"), z("9000-01-01T00:00")):
        with pytest.raises(ValueError, match="from 1900 to 8999"):
            cron.next_after(c, bad, "j")
        with pytest.raises(ValueError, match="from 1900 to 8999"):
            list(cron.occurrences(c, bad, math.inf, "j"))
    assert cron.next_after(c, z("8999-12-31T23:30"), "j") == z("9000-01-01T00:00")
    # an unvalidated expression that never fires has no next occurrence
    assert cron.next_after(Cron("0 0 30 2 *"), 0.0, "j") is None


def test_calls_from_many_threads_agree_with_serial_calls():
    c = cron_rules.validate(Cron("*/7 * * * *", "Australia/Lord_Howe", "both", jitter=30))
    starts = [z("2026-04-04T14:00") + 61.7 * i for i in range(200)]
    serial = [cron.next_after(c, t, "job") for t in starts]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(lambda t: cron.next_after(c, t, "job"), starts)) == serial


# ---- jitter ------------------------------------------------------------------------

EXPRS = st.sampled_from(
    [
        "* * * * *",
        "*/5 * * * *",
        "0 * * * *",
        "30 2 * * *",
        "*/15 1-3 * * *",
        "*/10 * * * * *",
        "0 9 * * 1-5",
    ]
)
ZONES = st.sampled_from(["UTC", "Europe/Paris", "Australia/Lord_Howe", "America/New_York"])
STARTS = st.sampled_from(
    [
        z("2026-03-28T20:00"),
        z("2026-10-24T20:00"),
        z("2026-04-04T10:00"),
        z("2026-10-03T10:00"),
        z("2026-06-01T00:00"),
    ]
)


@settings(max_examples=60, deadline=None)
@given(
    EXPRS,
    ZONES,
    st.sampled_from(list(Ambiguous)),
    st.sampled_from(list(Missing)),
    st.floats(0.001, 7200),
    st.text(min_size=1, max_size=20),
    STARTS,
)
def test_jitter_stays_between_a_base_occurrence_and_the_next(
    expr, tz, amb, miss, jitter, job_id, a
):
    base = cron_rules.validate(Cron(expr, tz, amb, miss))
    jit = cron_rules.validate(Cron(expr, tz, amb, miss, jitter=jitter))
    bases = list(itertools.islice(cron.occurrences(base, a, a + 3 * 86400, job_id), 26))
    runs = []
    for b, nxt in zip(bases, bases[1:], strict=False):
        j = cron.next_after(jit, b - 0.001, job_id)
        assert j is not None and b <= j < min(b + jitter, nxt)
        assert j == round(j * 1000) / 1000  # an exact millisecond
        assert cron.next_after(jit, j, job_id) == cron.next_after(jit, nxt - 0.001, job_id)
        if j > b:  # from inside the delay, the delayed run is still the next one
            assert cron.next_after(jit, (b + j) / 2, job_id) == j
        runs.append(j)
    if runs:
        assert [x for x in cron.occurrences(jit, runs[0], runs[-1] + 0.0005, job_id)] == runs


def test_jitter_is_a_fixed_fraction_per_job_and_spreads_jobs():
    c = cron_rules.validate(Cron("0 * * * *", jitter=600))
    t = z("2026-05-01T00:30")
    offsets = [cron.next_after(c, t, f"job-{i}") - z("2026-05-01T01:00") for i in range(200)]
    assert len(set(offsets)) == 200
    assert min(offsets) < 30 and max(offsets) > 570  # roughly uniform over [0, 600)
    assert sum(offsets) / 200 == pytest.approx(300, abs=60)
    # the same fraction for the same job at every occurrence (the gap allows all of it)
    a = cron.next_after(c, z("2026-05-01T00:30"), "job-7") - z("2026-05-01T01:00")
    b = cron.next_after(c, z("2026-07-09T13:30"), "job-7") - z("2026-07-09T14:00")
    assert a == b


def test_jitter_is_clamped_to_the_gap_to_the_next_occurrence():
    c = cron_rules.validate(Cron("* * * * *", jitter=3600))  # far more than the 60 s gap
    for i in range(50):
        j = cron.next_after(c, 59.5, f"job-{i}")
        assert j is not None and 60 <= j < 120


def test_a_run_jittered_past_a_fold_is_found_from_after_the_fold():
    # 02:30 CEST on 10-25 is 00:30Z; clocks go back at 01:00Z, so at 01:10Z the wall clock
    # reads 02:10 CET, below 02:30: the search back for the delayed run must look above it
    c = cron_rules.validate(Cron("30 2 * * *", "Europe/Paris", "first", jitter=7200))
    b = z("2026-10-25T00:30")
    job, j = next(
        (f"job-{i}", x)
        for i in range(100)
        if (x := cron.next_after(c, b - 0.001, f"job-{i}")) > b + 3600
    )  # type: ignore
    assert j < b + 7200
    for t in (z("2026-10-25T01:00"), z("2026-10-25T01:10"), j - 0.001):
        assert cron.next_after(c, t, job) == j
        assert next(cron.occurrences(c, t, t + 86400, job)) == j
    after = cron.next_after(c, j, job)
    assert after is not None and z("2026-10-26T01:30") <= after < z("2026-10-26T03:30")


def test_jitter_is_the_same_in_another_process():
    c = cron_rules.validate(Cron("*/5 * * * *", "Europe/Paris", jitter=120))
    here = [cron.next_after(c, 1_780_000_000 + 333 * i, f"job-{i}") for i in range(20)]
    code = (
        "from scheduler import cron, cron_rules; from scheduler.model import Cron\n"
        "c = cron_rules.validate(Cron('*/5 * * * *', 'Europe/Paris', jitter=120))\n"
        "print(repr([cron.next_after(c, 1_780_000_000 + 333 * i, f'job-{i}') "
        "for i in range(20)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345"},
    ).stdout
    assert out.strip() == repr(here)
