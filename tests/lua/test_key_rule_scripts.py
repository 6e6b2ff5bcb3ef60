"""rule.lua and add.lua's check of the key rules' stamp (include/keyrules.lua), on a real
Redis: a change bumps the stamp in the same call (only a change), an add.lua call whose
stamp is stale is refused whole with nothing written, a call without a stamp (an older
client) is not checked, and the check costs one GET per call."""

from __future__ import annotations

import pytest
import redis

from scheduler.stores.redis import RedisStore, StoreCorruptError
from scheduler.testing import FakeClock
from tests.conftest import START
from tests.helpers import spec
from tests.lua.test_scripts import NOW, add_args, attempt, changed, dump

pytestmark = pytest.mark.redis


def stamp(client: redis.Redis, rs: RedisStore) -> str | None:
    got = client.get(rs.keys.rules_stamp)
    return None if got is None else got.decode()


def test_a_change_bumps_the_stamp_and_only_a_change(redis_url, redis_ns, redis_client, clock):
    rs = RedisStore(redis_url, redis_ns, clock=clock)
    try:
        assert attempt(rs, "rule", "task:t", "k:{a}") == f"1.{NOW}"
        assert attempt(rs, "rule", "task:t", "k:{a}") == ""  # the same: nothing changed
        clock.advance(1)
        assert attempt(rs, "rule", "lane:l", "L") == f"2.{NOW + 1000}"
        assert attempt(rs, "rule", "task:t", "") == f"3.{NOW + 1000}"  # removed
        assert attempt(rs, "rule", "task:t", "") == ""
        assert redis_client.hgetall(rs.keys.key_rules) == {b"lane:l": b"L"}
        assert stamp(redis_client, rs) == f"3.{NOW + 1000}"
    finally:
        rs.close()


@pytest.mark.parametrize("name", ["", "task:", "job:x", "t" * 1025, "lane"])
def test_rule_refuses_a_bad_name_and_writes_nothing(redis_url, redis_ns, redis_client, name):
    rs = RedisStore(redis_url, redis_ns, clock=FakeClock(START))
    try:
        before = dump(redis_client, rs.keys.prefix)
        assert attempt(rs, "rule", name, "k") == "ERROR: duetime bad-input rule"
        assert changed(before, dump(redis_client, rs.keys.prefix)) == []
    finally:
        rs.close()


def test_rule_refuses_a_corrupt_namespace_key(redis_url, redis_ns, redis_client, clock):
    rs = RedisStore(redis_url, redis_ns, clock=clock)
    try:
        redis_client.set(rs.keys.key_rules, b"planted")
        with pytest.raises(StoreCorruptError, match="keyrules is a string, expected hash"):
            rs.set_key_rule("k", task="t")
        redis_client.delete(rs.keys.key_rules)
        redis_client.rpush(rs.keys.rules_stamp, b"x")
        with pytest.raises(StoreCorruptError, match="keyrules:stamp is a list"):
            rs.set_key_rule("k", task="t")
        with pytest.raises(StoreCorruptError, match="keyrules:stamp is a list"):
            rs.add(spec("x"))  # its stamp checked: the key is not a string
        assert rs.get("x") is None
        assert attempt(rs, "add", *add_args(), "")[0] == "created"  # unchecked: not read
    finally:
        rs.close()


def test_a_stale_stamp_refuses_the_whole_call_and_none_is_unchecked(
    redis_url, redis_ns, redis_client, clock
):
    rs = RedisStore(redis_url, redis_ns, clock=clock)
    try:
        one, two = [*add_args(job="a"), ""], [*add_args(job="b"), ""]
        assert attempt(rs, "add", *one, "0")[0] == "created"  # "0": never changed
        new = attempt(rs, "rule", "task:t", "k")
        before = dump(redis_client, rs.keys.prefix)
        assert attempt(rs, "add", *one, *two, "0") == f"ERROR: duetime stale-rules {new}"
        assert attempt(rs, "add", *two, "0") == f"ERROR: duetime stale-rules {new}"
        assert changed(before, dump(redis_client, rs.keys.prefix)) == []
        assert attempt(rs, "add", *two, new)[0] == "created"
        assert attempt(rs, "add", *add_args(job="c"))[0] == "created"  # no stamp: unchecked
        assert attempt(rs, "add", *add_args(job="d"), "")[0] == "created"
    finally:
        rs.close()


def gets(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_get", {}).get("calls", 0))


def test_the_check_costs_one_get_per_call(private_redis):
    client = redis.Redis.from_url(private_redis.url)
    rs = RedisStore(private_redis.url, "g", clock=FakeClock(START))
    try:
        many = [x for i in range(5) for x in [*add_args(job=f"m{i}"), ""]]
        attempt(rs, "add", *many)  # the namespace's keys made, scripts loaded
        client.config_resetstat()
        attempt(rs, "add", *many)
        unchecked = gets(client)
        client.config_resetstat()
        attempt(rs, "add", *many, "0")
        assert gets(client) == unchecked + 1
    finally:
        rs.close()
        client.close()
