"""Namespace-wide keys of the wrong type (docs/reliability.md, bad data): a due set, `lease`,
`running`, `events`, `stats`, `fence`, `seq`, `gen`, `epoch`, `layout`, `lanes`,
`quarantined` cannot be moved aside like one job. Every script that touches one answers
``ERR duetime corrupt <key> is a <type>, expected <type>`` before its first write (the
whole namespace is compared before and after); a counter that is not an integer likewise.
``RedisStore`` raises ``StoreCorruptError`` naming the key (logged at most once a minute
per key), and ``check_server`` refuses to start a replica on such a namespace.

The fast subset plants each key each script touches as one other TYPE (rotating); the
full matrix (``-m corruption_full``) plants every other TYPE.
"""

from __future__ import annotations

import itertools
import logging
from types import SimpleNamespace

import pytest
import redis

from scheduler.model import After, Every
from scheduler.stores.redis import RedisStore, StoreCorruptError
from scheduler.stores.redis.protocol import gateway
from scheduler.testing import FakeClock
from tests.helpers import read_job_hash, spec
from tests.lua.corruption import dump

pytestmark = pytest.mark.redis

WANT = {
    "due:default": "zset",
    "lease": "zset",
    "running": "hash",
    "events": "stream",
    "stats": "hash",
    "quarantined": "hash",
    "lanes": "set",
    "fence": "string",
    "seq": "string",
    "gen": "string",
    "epoch": "string",
    "layout": "string",
    "tasks": "hash",
    "parked": "set",
}
_COMMIT = ["lease", "running", "events", "stats", "quarantined", "seq", "layout", "due:default"]
TOUCHES = {  # the namespace keys each script checks (with the job's lane: default)
    "claim": ["due:default", "lease", "running", "events", "stats", "quarantined", "seq"]
    + ["fence", "epoch", "layout", "tasks", "parked"],
    "complete": _COMMIT,
    "complete_many": _COMMIT,
    "fail": _COMMIT,
    "release": _COMMIT,
    "renew": ["lease", "running", "layout"],
    "cancel": ["events", "stats", "quarantined", "layout", "due:default"],
    "pause": ["events", "stats", "quarantined", "layout", "due:default"],
    "resume": ["events", "stats", "quarantined", "seq", "layout", "due:default"],
    "trigger": ["events", "stats", "quarantined", "seq", "layout", "due:default"],
    "plan": ["events", "stats", "quarantined", "seq", "layout"],
    "backfill": ["events", "stats", "quarantined", "seq", "layout", "due:default"],
    "add": ["events", "stats", "quarantined", "seq", "gen", "lanes", "layout", "due:default"],
    "quarantine": ["lease", "running", "events", "stats", "quarantined", "layout"],
}
TYPES = ["string", "list", "set", "zset", "hash", "stream"]
COUNTERS = {"fence", "seq", "gen"}


@pytest.fixture
def text_client(redis_url):
    c = redis.Redis.from_url(redis_url, decode_responses=True)
    yield c
    c.close()


def busy(rs: RedisStore, clock: FakeClock) -> dict[str, str]:
    """A namespace where each script has work: jobs due, a claim held, a paused job, a
    fixed-rate series. Returns the live claim's job and token."""
    rs.add(spec("held", After(0)))
    (c,) = rs.claim_due({"default": 1}, 30, "o1").claims
    rs.add(spec("due", After(0)))
    rs.add(spec("tick", Every(60, anchor=clock.now())))
    rs.add(spec("napping", After(5)))
    assert rs.pause("napping")
    return {"job": c.job_id, "token": c.token}


def args_of(rs: RedisStore, script: str, held: dict[str, str]) -> list[str]:
    job, token = held["job"], held["token"]
    gen = read_job_hash(rs.redis, rs.keys.job("tick"))["gen"]
    return {
        "claim": ["o2", "req1", "30000", "*", "", "default", "10"],
        "complete": [job, token, "null"],
        "complete_many": [job, token, "null"],
        "fail": [job, token, "boom", ""],
        "release": [job, token],
        "renew": ["30000", token],
        "cancel": ["due"],
        "pause": ["due"],
        "resume": ["napping"],
        "trigger": ["due"],
        "plan": ["tick", gen, "1", "1000", "after", "2000"],
        "backfill": ["tick", gen, "1000"],
        "add": rs._add_args(spec("new", After(0))),
        "quarantine": [job, token, "the definition does not parse"],
    }[script]


def plant(r: redis.Redis, key: str, kind: str) -> None:
    r.delete(key)
    {
        "string": lambda: r.set(key, "x"),
        "list": lambda: r.rpush(key, "x"),
        "set": lambda: r.sadd(key, "x"),
        "zset": lambda: r.zadd(key, {"x": 1}),
        "hash": lambda: r.hset(key, "x", "1"),
        "stream": lambda: r.xadd(key, {"x": "1"}),
    }[kind]()


def cases(full: bool) -> list[tuple[str, str, str]]:
    out = []
    turn = itertools.count()
    for script, keys in TOUCHES.items():
        for key in keys:
            others = [t for t in TYPES if t != WANT[key]]
            if key in COUNTERS:
                others.append("text")  # a string that is not an integer
            if full:
                out += [(script, key, t) for t in others]
            else:
                out.append((script, key, others[next(turn) % len(others)]))
    return out


def check(redis_url, redis_ns, redis_client, text_client, script, key, kind):
    clock = FakeClock(1000.0)
    rs = RedisStore(text_client, redis_ns, clock=clock)
    held = busy(rs, clock)
    full = rs.keys.prefix + key
    if kind == "text":
        redis_client.set(full, "soon")
        what = "is not an integer, expected an integer"
    else:
        plant(redis_client, full, kind)
        what = f"is a {kind}, expected {WANT[key]}"
    before = dump(redis_client, rs.keys.prefix)
    with pytest.raises(redis.ResponseError) as err:
        argv = [rs.keys.prefix, rs._now_arg(), *args_of(rs, script, held)]
        gateway.call(rs.redis, rs._scripts[script], [rs.keys.epoch], argv)
    assert str(err.value) == f"duetime corrupt {full} {what}"
    assert dump(redis_client, rs.keys.prefix) == before  # nothing written
    with pytest.raises(StoreCorruptError, match="duetime writes nothing to this namespace"):
        rs.check_server()


@pytest.mark.parametrize("script,key,kind", cases(full=False), ids="-".join)
def test_a_corrupt_namespace_key_stops_every_script_before_its_first_write(
    redis_url, redis_ns, redis_client, text_client, script, key, kind
):
    check(redis_url, redis_ns, redis_client, text_client, script, key, kind)


@pytest.mark.corruption_full
@pytest.mark.parametrize("script,key,kind", cases(full=True), ids="-".join)
def test_a_corrupt_namespace_key_stops_every_script_before_its_first_write_full(
    redis_url, redis_ns, redis_client, text_client, script, key, kind
):
    check(redis_url, redis_ns, redis_client, text_client, script, key, kind)


def test_a_stats_counter_that_is_not_an_integer_stops_the_scripts_that_count_it(
    redis_ns, redis_client, text_client
):
    clock = FakeClock(1000.0)
    rs = RedisStore(text_client, redis_ns, clock=clock)
    rs.add(spec("a", After(0)))
    redis_client.hset(rs.keys.stats, "claimed", "many")
    before = dump(redis_client, rs.keys.prefix)
    with pytest.raises(StoreCorruptError) as err:
        rs.claim_due({"default": 10}, 30, "o")
    assert err.value.key == rs.keys.stats and "field claimed is not an integer" in str(err.value)
    assert dump(redis_client, rs.keys.prefix) == before
    assert rs.cancel("a")  # a script that writes no `claimed` event still works


def test_the_store_names_the_key_says_what_to_do_and_logs_once_a_minute(
    redis_ns, redis_client, text_client, caplog
):
    clock = FakeClock(1000.0)
    rs = RedisStore(text_client, redis_ns, clock=clock)
    rs.add(spec("a", After(0)))
    plant(redis_client, rs.keys.lease, "string")
    caplog.set_level(logging.ERROR, logger="duetime.redis")
    for _ in range(5):
        with pytest.raises(StoreCorruptError) as err:
            rs.claim_due({"default": 10}, 30, "o")
        assert err.value.key == rs.keys.lease and err.value.logged
    message = str(err.value)
    assert f"{rs.keys.lease} is a string, expected zset" in message
    assert f"RENAME {rs.keys.lease} {rs.keys.lease}.corrupt" in message
    assert [r.getMessage() for r in caplog.records] == [message]  # one line, not five
    with pytest.raises(StoreCorruptError, match="expected zset"):
        rs.check_server()  # a replica refuses to start
    redis_client.delete(rs.keys.lease)
    assert [c.job_id for c in rs.claim_due({"default": 10}, 30, "o").claims] == ["a"]


def test_the_dispatcher_does_not_log_again_what_the_store_reported(caplog):
    from scheduler.dispatcher import Dispatcher

    exc = StoreCorruptError("x", "k")
    exc.logged = True
    me = SimpleNamespace(_backoff=0.0, _backoff_min=0.1, _backoff_max=1.0)
    caplog.set_level(logging.DEBUG)
    Dispatcher._back_off(me, exc)  # type: ignore[arg-type]
    assert me._backoff == 0.1 and caplog.records == []
