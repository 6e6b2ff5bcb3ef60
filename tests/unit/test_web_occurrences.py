"""A job's next occurrences on its detail page, with the daylight-saving decisions."""

from __future__ import annotations

import datetime as dt

import pytest

from scheduler.model import After, Ambiguous, Cron, Every, JobSpec, Missing, TaskRef

pytest.importorskip("starlette", reason="the web extra is not installed")
from scheduler.web.occurrences import upcoming  # noqa: E402


def utc(*args: int) -> float:
    return dt.datetime(*args, tzinfo=dt.timezone.utc).timestamp()


def spec(schedule: object) -> JobSpec:
    return JobSpec("j", TaskRef("t"), schedule)  # type: ignore[arg-type]


def test_a_missing_wall_time_is_shifted_or_listed_as_skipped():
    shifted = upcoming(spec(Cron("30 2 * * *", "Europe/Berlin")), None, utc(2026, 3, 27))
    assert shifted[2]["local"] == "2026-03-29T03:00:00+02:00"
    assert shifted[2]["decision"].startswith("missing=shift")
    skipped = upcoming(
        spec(Cron("30 2 * * *", "Europe/Berlin", missing=Missing.SKIP)), None, utc(2026, 3, 27)
    )
    assert "does not exist" in skipped[2]["local"] and "skipped" in skipped[2]["decision"]
    assert [o["decision"] for o in skipped].count("") == len(skipped) - 1


@pytest.mark.parametrize(
    ("policy", "which"),
    [("first", ["earlier"]), ("last", ["later"]), ("both", ["earlier", "later"])],
)
def test_a_wall_time_that_occurs_twice_names_the_policy_and_which_one(policy, which):
    c = Cron("30 2 * * *", "Europe/Berlin", ambiguous=Ambiguous(policy))
    got = [o for o in upcoming(spec(c), None, utc(2026, 10, 24)) if o["decision"]]
    assert [o["decision"].split("this is the ")[1].split()[0] for o in got] == which
    assert all(f"ambiguous={policy}" in o["decision"] for o in got)


def test_fixed_rate_and_one_off():
    ten = upcoming(spec(Every(30, anchor=utc(2026, 1, 1))), None, utc(2026, 1, 1, 0, 0, 10))
    assert [o["at"] - utc(2026, 1, 1) for o in ten] == [30.0 * k for k in range(1, 11)]
    assert upcoming(spec(After(5)), 123.0, 100.0) == [
        {"at": 123.0, "local": "1970-01-01T00:02:03+00:00", "decision": ""}
    ]
    assert upcoming(None, None, 0.0) == []
