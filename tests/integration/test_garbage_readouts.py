"""Readouts over garbage written by hand: one bad key or entry is shown as such, never a
failed readout for the whole namespace. Found by an operator's corruption drill: a
string where a job's hash belongs made ``duetime ls`` and ``show`` exit 3 ("WRONGTYPE");
one event entry whose ``at`` is not a number, or a batch line of three fields, made
``duetime events``, ``show`` (of any job) and ``stats`` exit 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from scheduler import Client
from scheduler.cli import main
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.protocol import records

pytestmark = pytest.mark.redis


def cli(redis_url: str, redis_ns: str, *argv: str):
    return CliRunner().invoke(main, [*argv, "--redis", redis_url, "-n", redis_ns])


def test_a_job_key_of_the_wrong_type_is_listed_as_malformed(redis_url, redis_ns, redis_client):
    with Client(redis_url, namespace=redis_ns) as client:
        for n in range(3):
            client.enqueue("t.x", delay=600, job_id=f"j{n}")
        store = client.store
        assert isinstance(store, RedisStore)
        redis_client.delete(store.keys.job("j1"))
        redis_client.set(store.keys.job("j1"), "hello")
        for state in ("scheduled", "all", "live"):
            listed, cursor = {}, None
            while True:  # "all" scans: a page may hold some of the keys
                page = client.list_jobs(state, cursor=cursor)
                listed.update({i.job_id: i.state for i in page.jobs})
                if (cursor := page.cursor) is None:
                    break
            assert listed == {"j0": "scheduled", "j1": "malformed", "j2": "scheduled"}, state
        info = client.get("j1")
        assert info.state == "malformed" and "its key is not a hash" in info.schedule
        assert "run duetime doctor" in info.schedule
    ls = cli(redis_url, redis_ns, "ls")
    assert ls.exit_code == 0 and "malformed" in ls.stdout and "j0" in ls.stdout
    show = cli(redis_url, redis_ns, "show", "j1")
    assert show.exit_code == 0 and "its key is not a hash" in show.stdout


def test_an_event_entry_that_does_not_parse_is_shown_as_malformed(
    redis_url, redis_ns, redis_client
):
    with Client(redis_url, namespace=redis_ns) as client:
        client.enqueue("t.x", delay=600, job_id="k5")
        store = client.store
        assert isinstance(store, RedisStore)
        stream = store.keys.events
        redis_client.xadd(stream, {"kind": "succeeded", "job": "k5", "at": "notanumber"})
        redis_client.xadd(
            stream, {"kind": "claimed", "at": "1", "n": "2", "batch": "1|1||a\nx|y|z"}
        )
        redis_client.xadd(stream, {"kind": "failed", "job": "k5", "at": "5", "sched": "soon"})
        kinds = [e.kind for e in client.events(10)]
        assert kinds[0] == "scheduled" and kinds[1:] == ["malformed", "claimed"] + ["malformed"] * 2
        for argv in (("events",), ("show", "k5"), ("stats",), ("events", "--json")):
            result = cli(redis_url, redis_ns, *argv)
            assert result.exit_code == 0, (argv, result.output)
        text = cli(redis_url, redis_ns, "events").stdout
        assert "that does not parse: 'x|y|z'" in text and "notanumber" in text


def test_the_parser_keeps_what_parses_of_a_batch():
    fields = {"kind": "claimed", "at": "2000", "n": "3", "batch": "1000|1||a\nbad\n3000|2|2500|c"}
    events = records.events(fields)
    assert [(e.kind, e.job_id) for e in events] == [
        ("claimed", "a"),
        ("malformed", ""),
        ("claimed", "c"),
    ]
    assert events[2].ready == 2.5 and json.dumps(events[1].detail)


def test_a_lost_lanes_index_still_shows_the_default_lane_and_its_jobs(
    redis_url, redis_ns, redis_client
):
    """Eviction (or a restart without fsync) can take the `lanes` set and leave the jobs:
    stats and ls still find the default lane's jobs (they said "nothing was ever
    enqueued" and listed nothing)."""
    with Client(redis_url, namespace=redis_ns) as client:
        job = client.enqueue("tests.noop", delay=3600)
    redis_client.delete(f"duetime:{{{redis_ns}}}:lanes")
    stats = cli(redis_url, redis_ns, "stats")
    assert stats.exit_code == 0 and "nothing was ever enqueued" not in stats.output
    assert "default" in stats.output, stats.output
    listed = cli(redis_url, redis_ns, "ls", "--json")
    assert [j["job_id"] for j in json.loads(listed.stdout)["jobs"]] == [job]
