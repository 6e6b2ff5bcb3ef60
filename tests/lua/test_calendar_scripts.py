"""plan.lua and backfill.lua alone on a real Redis: compare-and-set, and stale writes that
change nothing (bad input: see test_scripts.py's BAD_INPUT)."""

from __future__ import annotations

import pytest

from scheduler.model import Cron, Every
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.claiming.claim_reply import claim_reply
from tests.conftest import START
from tests.helpers import read_job_hash, spec
from tests.lua.test_scripts import dump, raw

pytestmark = pytest.mark.redis


def job_hash(rs: RedisStore, redis_client, job: str) -> dict[str, str]:
    return read_job_hash(redis_client, rs.keys.job(job))


def test_add_writes_the_first_two_occurrences_of_a_calendar_job(rs, redis_client):
    rs.add(spec("c", Cron("*/10 * * * * *")))  # START = 1000 s: :10 past 1970
    h = job_hash(rs, redis_client, "c")
    assert (h["kind"], h["next"], h["after"], h["since"]) == (
        "cron",
        "1010000",
        "1020000",
        "1010000",
    )
    assert h["grace"] == "-1"  # the default: gap, <= 60 s


def test_plan_after_is_compare_and_set(rs, redis_client, clock):
    rs.add(spec("c", Cron("*/10 * * * * *")))
    clock.advance(10)
    assert len(rs.claim_due({"default": 1}, None, "o").claims) == 1
    h = job_hash(rs, redis_client, "c")  # claim_due wrote the plan
    assert (h["next"], h["after"]) == ("1020000", "1030000")
    before = dump(redis_client, rs.keys.prefix)
    # a racing replica writes the same slot again, or with a stale view: refused
    assert raw(rs, "plan", "c", h["gen"], h["e"], h["next"], "after", "1030000") == 0
    assert raw(rs, "plan", "c", h["gen"], h["e"], "1010000", "after", "1020000") == 0
    assert raw(rs, "plan", "c", "99", h["e"], h["next"], "after", "1030000") == 0
    assert dump(redis_client, rs.keys.prefix) == before


def test_a_series_waiting_for_a_plan_is_reannounced_until_a_replica_plans_it(
    rs, redis_client, clock
):
    rs.add(spec("c", Cron("*/10 * * * * *"), misfire_grace=1))
    clock.advance(45)  # :10 .. :40 missed
    reply = raw(rs, "claim", "o", "r1", "", "*", "", "default", "10")  # raw: no Python plan step
    assert claim_reply(reply).plans == ["c"]
    h = job_hash(rs, redis_client, "c")
    assert h["replan"] == "1" and h["next"] == "1010000"
    due = redis_client.zrange(rs.keys.prefix + "due:default", 0, -1, withscores=True)
    assert [score for _, score in due] == [START * 1000 + 46000]  # again in a second
    args = [
        "c",
        h["gen"],
        h["e"],
        h["next"],
        "replan",
        "1050000",
        "0",
        "1060000",
        "1010000",
        "1040000",
        "4",
        "misfire",
    ]
    assert raw(rs, "plan", *args) == 1
    assert raw(rs, "plan", *args) == 0  # once only
    h = job_hash(rs, redis_client, "c")
    assert (h["next"], h["after"], h.get("replan"), h["go"]) == ("1050000", "1060000", None, "")
    (skip,) = rs.get("c").skipped
    assert (skip.first, skip.last, skip.count, skip.reason) == (1010, 1040, 4, "misfire")


def test_backfill_refuses_a_stale_generation_and_writes_nothing(rs, redis_client):
    rs.add(spec("e", Every(10, anchor=START - 100)))
    gen = job_hash(rs, redis_client, "e")["gen"]
    before = dump(redis_client, rs.keys.prefix)
    assert raw(rs, "backfill", "e", str(int(gen) + 1), "900000") == -1
    assert dump(redis_client, rs.keys.prefix) == before
    # 900, 910, 1000 precede the series (its first occurrence is the first after "now",
    # 1010); 1010 is the pending one: the series runs it
    assert raw(rs, "backfill", "e", gen, "900000", "910000", "1000000", "1010000") == 3
    assert raw(rs, "backfill", "e", gen, "900000", "910000") == 0  # queued once only


def test_a_replica_without_the_jobs_zone_says_so_once_a_minute_and_records_it(
    rs, redis_client, clock, caplog, monkeypatch
):
    """tzdata differs between hosts: a replica that lacks the job's zone logged a 45-line
    traceback every second and `show` gave no reason. Now: one line a minute, no
    traceback, and a plan_failed event on the job."""
    import logging
    from zoneinfo import ZoneInfoNotFoundError

    from scheduler import cron
    from scheduler.stores.redis.claiming import calendar_plans

    rs.add(spec("z", Cron("*/10 * * * * *", tz="Europe/Berlin")))
    real = cron.zone

    def lacks_berlin(tz: str):
        if tz == "Europe/Berlin":
            raise ZoneInfoNotFoundError("No time zone found with key Europe/Berlin")
        return real(tz)

    cron.zone.cache_clear()
    monkeypatch.setattr(cron, "zone", lacks_berlin)
    monkeypatch.setattr(calendar_plans, "_said", {})
    with caplog.at_level(logging.ERROR, "duetime.redis"):
        for _ in range(3):
            clock.advance(10)
            rs.claim_due({"default": 1}, None, "o")
    said = [r for r in caplog.records if "cannot plan its calendar series" in r.getMessage()]
    assert len(said) == 1 and not said[0].exc_info
    assert "install or update tzdata here" in said[0].getMessage()
    events = [e for e in rs.events(50) if e.kind == "plan_failed"]
    assert len(events) == 1 and events[0].job_id == "z" and "Europe/Berlin" in events[0].detail
