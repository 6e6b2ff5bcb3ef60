"""Cron schedules across real daylight-saving changes: hand-computed UTC instants.

The 2026 changes used (UTC instants from the zones' published rules):
  Europe/Paris         03-29 01:00Z  02:00 CET (+1) -> 03:00 CEST (+2)
                       10-25 01:00Z  03:00 CEST     -> 02:00 CET
  America/New_York     03-08 07:00Z  02:00 EST (-5) -> 03:00 EDT (-4)
                       11-01 06:00Z  02:00 EDT      -> 01:00 EST
  Australia/Sydney     04-04 16:00Z  03:00 AEDT (+11) -> 02:00 AEST (+10)   (autumn, April)
                       10-03 16:00Z  02:00 AEST       -> 03:00 AEDT         (spring, October)
  Australia/Lord_Howe  04-04 15:00Z  02:00 (+11)    -> 01:30 (+10:30)       (30 minutes)
                       10-03 15:30Z  02:00 (+10:30) -> 02:30 (+11)
Every expectation below was computed by hand from that table, not by the code under test.
"""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler import cron, cron_rules
from scheduler.model import Cron

UTC = dt.timezone.utc
F, L, B = "first", "last", "both"
SH, SK = "shift", "skip"


def z(s: str) -> float:
    return dt.datetime.fromisoformat(s).replace(tzinfo=UTC).timestamp()


def iso(x: float) -> str:
    return dt.datetime.fromtimestamp(x, UTC).strftime("%Y-%m-%dT%H:%M")


def quarter_hours(date: str, *hours: int) -> list[str]:
    return [f"{date}T{h:02d}:{m:02d}" for h in hours for m in (0, 15, 30, 45)]


CASES = [
    # -- Europe/Paris, spring: 02:00-02:59 does not exist on 03-29
    (
        "Europe/Paris",
        "30 2 * * *",
        F,
        SH,
        "2026-03-28",
        "2026-03-31",
        ["2026-03-28T01:30", "2026-03-29T01:00", "2026-03-30T00:30"],
    ),
    (
        "Europe/Paris",
        "30 2 * * *",
        F,
        SK,
        "2026-03-28",
        "2026-03-31",
        ["2026-03-28T01:30", "2026-03-30T00:30"],
    ),
    # 02:00-02:45 all shift to 01:00Z, which is also 03:00 CEST: one occurrence
    (
        "Europe/Paris",
        "*/15 1-3 * * *",
        F,
        SH,
        "2026-03-28T22:00",
        "2026-03-29T03:00",
        quarter_hours("2026-03-29", 0, 1),
    ),
    (
        "Europe/Paris",
        "*/15 1-3 * * *",
        F,
        SK,
        "2026-03-28T22:00",
        "2026-03-29T03:00",
        quarter_hours("2026-03-29", 0, 1),
    ),
    (
        "Europe/Paris",
        "0 * * * *",
        B,
        SK,
        "2026-03-28T22:30",
        "2026-03-29T03:00",
        ["2026-03-28T23:00", "2026-03-29T00:00", "2026-03-29T01:00", "2026-03-29T02:00"],
    ),
    # -- Europe/Paris, autumn: 02:00-02:59 happens twice on 10-25 (00:xxZ, then 01:xxZ)
    (
        "Europe/Paris",
        "30 2 * * *",
        F,
        SH,
        "2026-10-24",
        "2026-10-27",
        ["2026-10-24T00:30", "2026-10-25T00:30", "2026-10-26T01:30"],
    ),
    (
        "Europe/Paris",
        "30 2 * * *",
        L,
        SH,
        "2026-10-24",
        "2026-10-27",
        ["2026-10-24T00:30", "2026-10-25T01:30", "2026-10-26T01:30"],
    ),
    (
        "Europe/Paris",
        "30 2 * * *",
        B,
        SH,
        "2026-10-24",
        "2026-10-27",
        ["2026-10-24T00:30", "2026-10-25T00:30", "2026-10-25T01:30", "2026-10-26T01:30"],
    ),
    (
        "Europe/Paris",
        "*/15 1-3 * * *",
        F,
        SH,
        "2026-10-24T22:00",
        "2026-10-25T04:00",
        quarter_hours("2026-10-24", 23) + quarter_hours("2026-10-25", 0, 2),
    ),
    (
        "Europe/Paris",
        "*/15 1-3 * * *",
        L,
        SH,
        "2026-10-24T22:00",
        "2026-10-25T04:00",
        quarter_hours("2026-10-24", 23) + quarter_hours("2026-10-25", 1, 2),
    ),
    (
        "Europe/Paris",
        "*/15 1-3 * * *",
        B,
        SK,
        "2026-10-24T22:00",
        "2026-10-25T04:00",
        quarter_hours("2026-10-24", 23) + quarter_hours("2026-10-25", 0, 1, 2),
    ),
    (
        "Europe/Paris",
        "0 * * * *",
        F,
        SH,
        "2026-10-24T21:30",
        "2026-10-25T02:30",
        ["2026-10-24T22:00", "2026-10-24T23:00", "2026-10-25T00:00", "2026-10-25T02:00"],
    ),
    (
        "Europe/Paris",
        "0 * * * *",
        L,
        SH,
        "2026-10-24T21:30",
        "2026-10-25T02:30",
        ["2026-10-24T22:00", "2026-10-24T23:00", "2026-10-25T01:00", "2026-10-25T02:00"],
    ),
    (
        "Europe/Paris",
        "0 * * * *",
        B,
        SH,
        "2026-10-24T21:30",
        "2026-10-25T02:30",
        [
            "2026-10-24T22:00",
            "2026-10-24T23:00",
            "2026-10-25T00:00",
            "2026-10-25T01:00",
            "2026-10-25T02:00",
        ],
    ),
    # -- America/New_York: 02:xx missing on 03-08; 01:xx twice on 11-01 (05:xxZ, 06:xxZ)
    (
        "America/New_York",
        "30 2 * * *",
        F,
        SH,
        "2026-03-07",
        "2026-03-10",
        ["2026-03-07T07:30", "2026-03-08T07:00", "2026-03-09T06:30"],
    ),
    (
        "America/New_York",
        "30 2 * * *",
        F,
        SK,
        "2026-03-07",
        "2026-03-10",
        ["2026-03-07T07:30", "2026-03-09T06:30"],
    ),
    (
        "America/New_York",
        "*/15 1-3 * * *",
        L,
        SK,
        "2026-03-08T05:00",
        "2026-03-08T09:00",
        quarter_hours("2026-03-08", 6, 7),
    ),
    (
        "America/New_York",
        "30 1 * * *",
        F,
        SH,
        "2026-10-31",
        "2026-11-03",
        ["2026-10-31T05:30", "2026-11-01T05:30", "2026-11-02T06:30"],
    ),
    (
        "America/New_York",
        "30 1 * * *",
        L,
        SH,
        "2026-10-31",
        "2026-11-03",
        ["2026-10-31T05:30", "2026-11-01T06:30", "2026-11-02T06:30"],
    ),
    (
        "America/New_York",
        "30 1 * * *",
        B,
        SH,
        "2026-10-31",
        "2026-11-03",
        ["2026-10-31T05:30", "2026-11-01T05:30", "2026-11-01T06:30", "2026-11-02T06:30"],
    ),
    (
        "America/New_York",
        "*/15 1-3 * * *",
        F,
        SH,
        "2026-11-01T04:00",
        "2026-11-01T09:00",
        quarter_hours("2026-11-01", 5, 7, 8),
    ),
    (
        "America/New_York",
        "*/15 1-3 * * *",
        L,
        SH,
        "2026-11-01T04:00",
        "2026-11-01T09:00",
        quarter_hours("2026-11-01", 6, 7, 8),
    ),
    (
        "America/New_York",
        "0 * * * *",
        B,
        SH,
        "2026-11-01T04:30",
        "2026-11-01T07:30",
        ["2026-11-01T05:00", "2026-11-01T06:00", "2026-11-01T07:00"],
    ),
    (
        "America/New_York",
        "0 * * * *",
        F,
        SH,
        "2026-11-01T04:30",
        "2026-11-01T07:30",
        ["2026-11-01T05:00", "2026-11-01T07:00"],
    ),
    # -- Australia/Sydney (southern): 02:xx twice on 04-05, 02:xx missing on 10-04
    (
        "Australia/Sydney",
        "30 2 * * *",
        F,
        SH,
        "2026-04-03",
        "2026-04-06",
        ["2026-04-03T15:30", "2026-04-04T15:30", "2026-04-05T16:30"],
    ),
    (
        "Australia/Sydney",
        "30 2 * * *",
        L,
        SH,
        "2026-04-03",
        "2026-04-06",
        ["2026-04-03T15:30", "2026-04-04T16:30", "2026-04-05T16:30"],
    ),
    (
        "Australia/Sydney",
        "30 2 * * *",
        B,
        SK,
        "2026-04-03",
        "2026-04-06",
        ["2026-04-03T15:30", "2026-04-04T15:30", "2026-04-04T16:30", "2026-04-05T16:30"],
    ),
    (
        "Australia/Sydney",
        "30 2 * * *",
        F,
        SH,
        "2026-10-02",
        "2026-10-05",
        ["2026-10-02T16:30", "2026-10-03T16:00", "2026-10-04T15:30"],
    ),
    (
        "Australia/Sydney",
        "30 2 * * *",
        B,
        SK,
        "2026-10-02",
        "2026-10-05",
        ["2026-10-02T16:30", "2026-10-04T15:30"],
    ),
    (
        "Australia/Sydney",
        "*/15 1-3 * * *",
        L,
        SH,
        "2026-04-04T13:00",
        "2026-04-04T18:00",
        quarter_hours("2026-04-04", 14, 16, 17),
    ),
    (
        "Australia/Sydney",
        "0 * * * *",
        F,
        SK,
        "2026-10-03T13:30",
        "2026-10-03T17:30",
        ["2026-10-03T14:00", "2026-10-03T15:00", "2026-10-03T16:00", "2026-10-03T17:00"],
    ),
    # -- Australia/Lord_Howe (30 minutes): 01:30-01:59 twice on 04-05, 02:00-02:29
    #    missing on 10-04
    (
        "Australia/Lord_Howe",
        "45 1 * * *",
        F,
        SH,
        "2026-04-03",
        "2026-04-06",
        ["2026-04-03T14:45", "2026-04-04T14:45", "2026-04-05T15:15"],
    ),
    (
        "Australia/Lord_Howe",
        "45 1 * * *",
        L,
        SH,
        "2026-04-03",
        "2026-04-06",
        ["2026-04-03T14:45", "2026-04-04T15:15", "2026-04-05T15:15"],
    ),
    (
        "Australia/Lord_Howe",
        "45 1 * * *",
        B,
        SH,
        "2026-04-03",
        "2026-04-06",
        ["2026-04-03T14:45", "2026-04-04T14:45", "2026-04-04T15:15", "2026-04-05T15:15"],
    ),
    (
        "Australia/Lord_Howe",
        "30 2 * * *",
        B,
        SK,
        "2026-04-03",
        "2026-04-06",
        ["2026-04-03T15:30", "2026-04-04T16:00", "2026-04-05T16:00"],
    ),
    (
        "Australia/Lord_Howe",
        "15 2 * * *",
        F,
        SH,
        "2026-10-02",
        "2026-10-05",
        ["2026-10-02T15:45", "2026-10-03T15:30", "2026-10-04T15:15"],
    ),
    (
        "Australia/Lord_Howe",
        "15 2 * * *",
        F,
        SK,
        "2026-10-02",
        "2026-10-05",
        ["2026-10-02T15:45", "2026-10-04T15:15"],
    ),
    (
        "Australia/Lord_Howe",
        "30 2 * * *",
        F,
        SK,
        "2026-10-02",
        "2026-10-05",
        ["2026-10-02T16:00", "2026-10-03T15:30", "2026-10-04T15:30"],
    ),
    (
        "Australia/Lord_Howe",
        "*/15 1-3 * * *",
        F,
        SH,
        "2026-10-03T13:00",
        "2026-10-03T18:00",
        [
            "2026-10-03T14:30",
            "2026-10-03T14:45",
            "2026-10-03T15:00",
            "2026-10-03T15:15",
            "2026-10-03T15:30",
            "2026-10-03T15:45",
        ]
        + quarter_hours("2026-10-03", 16),
    ),
    (
        "Australia/Lord_Howe",
        "*/15 1-3 * * *",
        F,
        SH,
        "2026-04-04T13:00",
        "2026-04-04T18:00",
        [
            "2026-04-04T14:00",
            "2026-04-04T14:15",
            "2026-04-04T14:30",
            "2026-04-04T14:45",
            "2026-04-04T15:30",
            "2026-04-04T15:45",
        ]
        + quarter_hours("2026-04-04", 16)
        + ["2026-04-04T17:00", "2026-04-04T17:15"],
    ),
    (
        "Australia/Lord_Howe",
        "*/15 1-3 * * *",
        L,
        SH,
        "2026-04-04T13:00",
        "2026-04-04T18:00",
        [
            "2026-04-04T14:00",
            "2026-04-04T14:15",
            "2026-04-04T15:00",
            "2026-04-04T15:15",
            "2026-04-04T15:30",
            "2026-04-04T15:45",
        ]
        + quarter_hours("2026-04-04", 16)
        + ["2026-04-04T17:00", "2026-04-04T17:15"],
    ),
    (
        "Australia/Lord_Howe",
        "*/15 1-3 * * *",
        B,
        SH,
        "2026-04-04T13:00",
        "2026-04-04T18:00",
        quarter_hours("2026-04-04", 14, 15, 16) + ["2026-04-04T17:00", "2026-04-04T17:15"],
    ),
    (
        "Australia/Lord_Howe",
        "0 * * * *",
        L,
        SH,
        "2026-10-03T13:00",
        "2026-10-03T17:00",
        ["2026-10-03T13:30", "2026-10-03T14:30", "2026-10-03T15:30", "2026-10-03T16:00"],
    ),
]


@pytest.mark.parametrize(
    "tz, expr, amb, miss, start, end, want",
    CASES,
    ids=[f"{c[0]}|{c[1]}|{c[2]}|{c[3]}|{c[4]}" for c in CASES],
)
def test_transition_table(tz, expr, amb, miss, start, end, want):
    c = cron_rules.validate(Cron(expr, tz, amb, miss))
    assert [iso(x) for x in cron.occurrences(c, z(start), z(end), "job")] == want
    # next_after steps through the same instants, starting just before the window
    got, t = [], z(start) - 0.001
    while (t := cron.next_after(c, t, "job")) is not None and t < z(end):  # type: ignore
        got.append(iso(t))
    assert got == want


def test_a_24_hour_gap_shifts_every_skipped_time_to_the_one_transition_instant():
    # Pacific/Apia skipped 2011-12-30 entirely: 23:59:59 (-10) on the 29th -> 00:00 (+14)
    # on the 31st, at 2011-12-30T10:00Z. Local 12:00, 18:00 on the 29th; 00:00-18:00 on the
    # 30th all shift to 10:00Z, which is also 00:00 on the 31st; then 06:00, 12:00.
    c = cron_rules.validate(Cron("0 */6 * * *", "Pacific/Apia", "first", "shift"))
    assert [
        iso(x) for x in cron.occurrences(c, z("2011-12-29T20:00"), z("2011-12-31T00:00"), "j")
    ] == [
        "2011-12-29T22:00",
        "2011-12-30T04:00",
        "2011-12-30T10:00",
        "2011-12-30T16:00",
        "2011-12-30T22:00",
    ]
    skip = cron_rules.validate(Cron("0 12 30 12 *", "Pacific/Apia", "first", "skip"))
    # skipped in 2011; 2012-12-30 12:00 in summer time (+14) is 22:00Z on the 29th
    assert cron.next_after(skip, z("2011-12-01T00:00"), "j") == z("2012-12-29T22:00")
