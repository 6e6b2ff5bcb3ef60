"""Readouts survive garbage in Redis (issue 9's theme, on the Python side): one job hash,
counter or RUNNING entry that does not parse used to fail `duetime ls`, `show`, `stats`
and the web console for the whole namespace ("'utf-8' codec can't decode byte 0xff",
"invalid literal for int()", "not enough values to unpack"). Each readout now shows the
rest, and a job that does not parse as `malformed`, with what to run."""

from __future__ import annotations

import json

import pytest
import redis
from click.testing import CliRunner

from scheduler import Client
from scheduler.cli import main
from tests.helpers import write_job_field

pytestmark = pytest.mark.redis


@pytest.fixture
def garbage(redis_url: str, redis_ns: str) -> Client:
    client = Client(redis_url, namespace=redis_ns)
    for job_id in ("good", "bad-utf8", "bad-next", "bad-runs"):
        client.enqueue("tests.garbage.x", delay=3600, job_id=job_id)
    raw = redis.Redis.from_url(redis_url)
    p = f"duetime:{{{redis_ns}}}:"
    raw.hset(p + "job:bad-utf8", "def", b"\xff\xfe{not json")
    write_job_field(raw, p + "job:bad-next", "next", "abc")
    write_job_field(raw, p + "job:bad-runs", "runs", "x")
    raw.hset(p + "stats", "scheduled", "notanumber")
    raw.hset(p + "running", mapping={"tok:1": "garbage|||", "tok:2": b"\xff"})
    raw.rpush(p + "skips:good", "garbage")  # a history entry: the job stays readable
    raw.rpush(p + "dead:good", "{not json")
    raw.close()
    return client


def test_the_cli_reads_out_a_namespace_with_garbage_in_it(garbage, redis_url, redis_ns):
    env = {"DUETIME_REDIS_URL": redis_url, "DUETIME_NAMESPACE": redis_ns}

    def run(*args: str) -> str:
        out = CliRunner().invoke(main, list(args), env=env)
        assert out.exit_code == 0, (args, out.output)
        assert "Traceback" not in out.output
        return out.output

    listed = run("ls")
    for job_id in ("good", "bad-utf8", "bad-next", "bad-runs"):
        assert job_id in listed, listed  # none hidden, none fails the listing
    assert listed.count("malformed") == 1 and "run duetime doctor" in listed
    states = {j["job_id"]: j["state"] for j in json.loads(run("ls", "--json"))["jobs"]}
    assert states == {
        "good": "scheduled",
        "bad-utf8": "scheduled",  # its definition is unreadable: shown, not run here
        "bad-next": "malformed",  # what `duetime doctor` moves aside
        "bad-runs": "scheduled",  # counted from 0 again, as the scripts read it
    }
    assert "malformed" in run("show", "bad-next") and "bad-utf8" in run("show", "bad-utf8")
    assert "malformed" not in run("show", "good")  # its garbled history entries left out
    assert "no running jobs" in run("ls", "--state", "running")
    run("stats")
    run("ls", "--state", "all")


def test_the_client_and_the_web_console_read_it_out_too(garbage, console_factory, redis_ns):
    assert len(garbage.jobs()) == 4
    states, cursor = set(), None
    while True:  # a SCAN-based listing: a page may hold any part of the namespace
        page = garbage.list_jobs(state="all", cursor=cursor)
        states |= {j.state for j in page.jobs}
        if page.cursor is None:
            break
        cursor = page.cursor
    assert states == {"scheduled", "malformed"}
    web, _ = console_factory()
    for path in ["", "jobs", "running", "failed", "events", "job/bad-next", "job/bad-utf8"]:
        r = web.get(f"/ns/{redis_ns}/{path}")
        assert r.status_code == 200, (path, r.text[:300])
