"""A claim's ready kept across a release (docs/decisions.md, "Dispatch lag counts from..."):
a RUNNING entry carries it after its sched ("<sched>@<ready>", lua/include/issue.lua) when
it is later, the re-run member a release queues always (include/due.lua); entries of the
previous form (without it) still read; a malformed one is moved aside as any other."""

from __future__ import annotations

import pytest

from scheduler.model import After, Commit, RetryPolicy
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.protocol.records import running_entry
from scheduler.testing import FakeClock
from tests.conftest import START
from tests.helpers import spec

pytestmark = pytest.mark.redis

NOW = int(START * 1000)


def retry_claimed(rs: RedisStore, clock: FakeClock):
    """Job "a" failed once at START + 1 (its retry due at + 3), the retry claimed at + 4."""
    rs.add(spec("a", After(0), retry=RetryPolicy(max_attempts=3)))
    (c,) = rs.claim_due({"default": 10}, 10.0, "o1").claims
    clock.advance(1)
    assert rs.fail(c, "boom", 2) is Commit.OK
    clock.advance(3)
    (c,) = rs.claim_due({"default": 10}, 10.0, "o1").claims
    return c


def test_a_retry_keeps_its_ready_in_its_entry_and_across_a_release(rs, clock, redis_client):
    c = retry_claimed(rs, clock)
    entry = redis_client.hget(rs.keys.running, c.token).decode()
    assert entry.split("|")[1] == f"{NOW}@{NOW + 3000}"
    assert running_entry(entry).ready == START + 3 == c.ready
    assert rs.release(c) is Commit.OK
    (member,) = redis_client.zrange(rs.keys.due("default"), 0, -1)
    assert member.decode().split("|")[3] == f"{NOW}@{NOW + 3000}"
    clock.advance(1)
    (again,) = rs.claim_due({"default": 10}, 10.0, "o1").claims
    assert (again.scheduled, again.attempt, again.ready) == (START, 2, START + 3)


def test_entries_of_the_previous_form_still_read(rs, clock, redis_client):
    """Written before the ready was kept: the release queues it at its sched (ready then)."""
    c = retry_claimed(rs, clock)
    entry = redis_client.hget(rs.keys.running, c.token).decode()
    redis_client.hset(rs.keys.running, c.token, entry.replace(f"@{NOW + 3000}", ""))
    assert running_entry(redis_client.hget(rs.keys.running, c.token).decode()).ready is None
    assert rs.release(c) is Commit.OK
    (again,) = rs.claim_due({"default": 10}, 10.0, "o1").claims
    assert (again.scheduled, again.attempt, again.ready) == (START, 2, START)


@pytest.mark.parametrize("at", ["@", "@x", "@" + "9" * 17, "@-1"])
def test_a_malformed_ready_is_moved_aside(rs, clock, redis_client, at):
    c = retry_claimed(rs, clock)
    entry = redis_client.hget(rs.keys.running, c.token).decode()
    bad = entry.replace(f"@{NOW + 3000}", at)
    redis_client.hset(rs.keys.running, c.token, bad)
    if len(at) < 17:  # the Python side checks digits, not int()'s length (as for any field)
        with pytest.raises(ValueError):
            running_entry(bad)
    assert rs.release(c) is Commit.QUARANTINED
    assert not redis_client.hexists(rs.keys.running, c.token)
    member = f"00000000000f|r|1|{NOW}{at}|2|0|b"
    redis_client.zadd(rs.keys.due("default"), {member: NOW})
    assert rs.claim_due({"default": 10}, 10.0, "o1").claims == []
    assert redis_client.zcard(rs.keys.due("default")) == 0


def test_a_kept_ready_never_lowers_the_namespace_layout(rs, clock, redis_client):
    """An older duetime reads layouts 1 and 2 only: it refuses a namespace that holds a
    kept ready (3) loudly ("run one version of duetime per namespace") instead of moving
    such entries aside as malformed. A layout is never lowered: a namespace whose jobs
    keep their small fields packed (4, from the first add) stays 4."""
    c = retry_claimed(rs, clock)  # its RUNNING entry keeps a ready later than its sched
    assert rs.release(c) is Commit.OK
    assert redis_client.get(rs.keys.layout) == b"4"
