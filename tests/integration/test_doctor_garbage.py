"""``duetime doctor`` finds what a claim would move aside, before it comes due: a
definition missing or not JSON, arguments that are not an object, an interval that is not
one. It found none of these (an operator's corruption drill): each waited for its due time
to be quarantined, and "doctor --dry-run" said the namespace was healthy."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from scheduler.cli import main
from scheduler.model import After, Every
from scheduler.stores.redis import RedisStore
from tests.helpers import spec

pytestmark = pytest.mark.redis


def test_doctor_reports_every_job_a_claim_would_move_aside(
    redis_url, redis_ns, redis_client, clock
):
    store = RedisStore(redis_url, redis_ns, clock=clock)
    for job in ("not-json", "no-def", "args-a-list", "fine"):
        store.add(spec(job, After(3600)))
    store.add(spec("bad-interval", Every(60)))
    key = store.keys.job
    definition = json.loads(redis_client.hget(key("args-a-list"), "def"))
    redis_client.hset(key("args-a-list"), "def", json.dumps({**definition, "a": "[1, 2]"}))
    redis_client.hset(key("not-json"), "def", "{not json")
    redis_client.hdel(key("no-def"), "def")
    redis_client.hset(key("bad-interval"), "interval", "abc")
    dry = CliRunner().invoke(main, ["doctor", "--dry-run", "--redis", redis_url, "-n", redis_ns])
    for job in ("not-json", "no-def", "args-a-list", "bad-interval"):
        assert job in dry.output, dry.output
    assert "fine" not in dry.output
    found = {f.job_id: f for f in store.reconcile().findings}
    assert set(found) == {"not-json", "no-def", "args-a-list", "bad-interval"}
    assert found["no-def"].action == found["bad-interval"].action == "moved aside"
    assert "definition does not parse (JSONDecodeError" in found["not-json"].problem
    assert "arguments are not a JSON object" in found["args-a-list"].problem
    assert found["args-a-list"].action == "reported: moved aside when it comes due"
    assert {q.job_id for q in store.quarantined()} == {"no-def", "bad-interval"}
    store.close()
