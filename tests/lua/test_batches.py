"""The batch paths of the scripts, on a real Redis with exact (fake-clock) time:
complete_many.lua (batched acks: per-item token checks and outcomes, resends, and the same
records as complete.lua) and claim.lua claiming a whole batch at once (fences, RUNNING
entries, leases and counters written once per call)."""

from __future__ import annotations

import pytest
import redis

from scheduler.model import After, Commit, Overlap
from tests.helpers import every, spec
from tests.lua.test_scripts import NOW, attempt, changed, claim, dump, events, job, kinds, raw

pytestmark = pytest.mark.redis


# differ between two jobs completed the same way
VOLATILE = {"last_token", "last_run", "gen", "started"}


def many(rs, *items):
    """complete_many.lua on (claim, result JSON) pairs."""
    return raw(rs, "complete_many", *[x for c, r in items for x in (c.job_id, c.token, r)])


def stats(client, rs) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in client.hgetall(rs.keys.stats).items()}


def test_each_item_gets_its_own_outcome_and_only_owners_commit(rs, clock, redis_client):
    for name in ("a", "b", "c", "d"):
        rs.add(spec(name, After(0)))
    got = {c.job_id: c for c in claim(rs, lease=5)}
    clock.advance(1)
    rs.renew([got["a"], got["b"], got["c"]], 10)  # d's lease stays at 5 s
    clock.advance(4)
    wrong = got["b"]._replace(token="o1:999")
    ghost = got["c"]._replace(job_id="ghost", token="o1:998")
    assert many(
        rs, (got["a"], '{"n":1}'), (wrong, "null"), (ghost, "null"), (got["d"], "null")
    ) == ["ok", "lease_lost", "not_found", "lease_lost"]
    assert job(redis_client, rs, "a")["state"] == "succeeded"
    assert job(redis_client, rs, "a")["last_result"] == '{"n":1}'
    for name in ("b", "d"):  # refused: nothing recorded, still RUNNING
        assert "state" not in job(redis_client, rs, name)
        assert redis_client.hexists(rs.keys.running, got[name].token)
    assert not redis_client.hexists(rs.keys.running, got["a"].token)
    assert kinds(redis_client, rs).count("succeeded") == 1
    assert stats(redis_client, rs)["succeeded"] == 1
    assert many(rs, (got["b"], "null")) == ["ok"]  # the right token still owns b


def test_a_resent_batch_is_ok_again_and_counts_once(rs, redis_client):
    rs.add(spec("a", After(0)))
    rs.add(spec("b", After(0)))
    ca, cb = claim(rs)
    assert many(rs, (ca, "1"), (cb, "2")) == ["ok", "ok"]
    before = dump(redis_client, rs.keys.prefix)
    assert many(rs, (ca, "1"), (cb, "2")) == ["ok", "ok"]
    assert changed(before, dump(redis_client, rs.keys.prefix)) == []
    assert job(redis_client, rs, "a")["runs"] == "1"


def test_the_same_item_twice_in_one_batch_commits_once(rs, redis_client):
    rs.add(spec("a", After(0)))
    (c,) = claim(rs)
    assert many(rs, (c, "1"), (c, "1")) == ["ok", "ok"]
    assert job(redis_client, rs, "a")["runs"] == "1"
    assert kinds(redis_client, rs).count("succeeded") == 1


@pytest.mark.parametrize("recurring", [False, True], ids=["one-off", "recurring"])
def test_it_records_exactly_what_complete_records(rs, clock, redis_client, recurring):
    for name in ("single", "batched"):
        rs.add(every(name, 10) if recurring else spec(name, After(0)))
    if recurring:
        clock.advance(10)  # the first run is one interval away
    got = {c.job_id: c for c in claim(rs)}
    assert raw(rs, "complete", "single", got["single"].token, "7") == "ok"
    assert many(rs, (got["batched"], "7")) == ["ok"]
    one, two = job(redis_client, rs, "single"), job(redis_client, rs, "batched")
    assert {k: v for k, v in one.items() if k not in VOLATILE | {"e"}} == {
        k: v for k, v in two.items() if k not in VOLATILE | {"e"}
    }
    assert ("state" in one) is (not recurring)
    for name in ("single", "batched"):  # a finished one-off is kept a day; a series stays
        assert (redis_client.pttl(rs.keys.job(name)) > 0) is (not recurring)
    ev = {e["job"]: e for e in events(redis_client, rs) if e["kind"] == "succeeded"}
    assert {k: v for k, v in ev["single"].items() if k != "job"} == {
        k: v for k, v in ev["batched"].items() if k != "job"
    }


def test_a_queued_overlap_occurrence_is_released_as_by_complete(rs, clock, redis_client):
    rs.add(every("q", 10, overlap=Overlap.QUEUE))
    clock.advance(10)
    (first,) = claim(rs, lease=60)
    clock.advance(10)
    assert claim(rs, lease=60) == []  # still running: the next occurrence is queued
    assert job(redis_client, rs, "q")["queued"]
    assert many(rs, (first, "null")) == ["ok"]
    (queued,) = claim(rs, lease=60)  # released by the batched ack
    assert queued.scheduled == (NOW + 20_000) / 1000


def test_a_capacity_over_1000_is_bad_input_and_writes_nothing(rs, redis_client):
    rs.add(spec("a", After(0)))
    before = dump(redis_client, rs.keys.prefix)
    reply = attempt(rs, "claim", "o1", "req", "10000", "*", "", "default", "1001")
    assert reply.startswith("ERROR: duetime bad-input capacity")
    assert changed(before, dump(redis_client, rs.keys.prefix)) == []


BAD = {
    "no-items": [],
    "half-a-triple": ["a", "o1:1"],
    "empty-job": ["", "{tok}", "1"],
    "empty-token": ["run", "", "1"],
    "second-item-bad": ["run", "{tok}", "1", "run", "", "1"],
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_refused_and_writes_nothing(rs, redis_client, case):
    rs.add(spec("run", After(0)))
    (c,) = claim(rs)
    before = dump(redis_client, rs.keys.prefix)
    args = [a.replace("{tok}", c.token) for a in BAD[case]]
    reply = attempt(rs, "complete_many", *args)
    assert reply.startswith("ERROR: duetime bad-input")
    assert changed(before, dump(redis_client, rs.keys.prefix)) == []


def test_the_store_splits_big_batches_and_maps_codes(rs, redis_client):
    for i in range(250):
        rs.add(spec(f"j{i}", After(0)))
    got = claim(rs, {"default": 100}) + claim(rs, {"default": 100}) + claim(rs, {"default": 100})
    assert len(got) == 250
    done = [(c, None) for c in got] + [(got[0]._replace(token="o1:0"), None)]
    assert rs.complete_many(done) == [Commit.OK] * 250 + [Commit.LEASE_LOST]
    assert stats(redis_client, rs)["succeeded"] == 250


# ---- claim.lua, a whole batch -------------------------------------------------------------


def test_a_batch_claim_writes_every_claim_once(rs, redis_client):
    for i in range(100):
        rs.add(spec(f"j{i:03}", After(0)))
    fence0 = int(redis_client.get(rs.keys.prefix + "fence") or 0)
    got = claim(rs, {"default": 100}, lease=10)
    assert [c.job_id for c in got] == [f"j{i:03}" for i in range(100)]  # FIFO
    assert [c.fence for c in got] == list(range(fence0 + 1, fence0 + 101))
    assert int(redis_client.get(rs.keys.prefix + "fence")) == fence0 + 100
    assert redis_client.hlen(rs.keys.running) == 100
    assert redis_client.zcard(rs.keys.lease) == 100
    assert {s for _, s in redis_client.zrange(rs.keys.lease, 0, -1, withscores=True)} == {
        NOW + 10_000
    }
    assert redis_client.zcard(rs.keys.due("default")) == 0
    assert stats(redis_client, rs)["claimed"] == 100
    assert kinds(redis_client, rs).count("claimed") == 100
    h = job(redis_client, rs, "j042")
    assert (h["running"], h["attempts"], h.get("e", "")) == ("1", "1", "")
    assert rs.complete_many([(c, None) for c in got]) == [Commit.OK] * 100
    assert redis_client.hlen(rs.keys.running) == 0 and redis_client.zcard(rs.keys.lease) == 0


SMALL = {b"listpack", b"ziplist"}  # (Redis 6 names a listpack a ziplist)


def test_a_batch_of_16_claims_or_more_writes_running_and_leases_as_tables(rs, redis_client):
    """Redis keeps a small hash or zset as a listpack, which every entry written, read or
    removed scans whole: a batch of 16 claims or more makes RUNNING a hashtable and the
    lease zset a skiplist (include/issue.lua, write_claims), and no reader sees how."""
    for i in range(20):
        rs.add(spec(f"j{i:02}", After(0)))
    small = claim(rs, {"default": 2}, lease=10)
    assert redis_client.object("encoding", rs.keys.running) in SMALL
    assert redis_client.object("encoding", rs.keys.lease) in SMALL
    big = claim(rs, {"default": 18}, lease=10)
    assert redis_client.object("encoding", rs.keys.running) == b"hashtable"
    assert redis_client.object("encoding", rs.keys.lease) == b"skiplist"
    tokens = {c.token.encode() for c in small + big}
    assert set(redis_client.hkeys(rs.keys.running)) == tokens
    assert set(redis_client.zrange(rs.keys.lease, 0, -1)) == tokens
    assert {s for _, s in redis_client.zrange(rs.keys.lease, 0, -1, withscores=True)} == {
        NOW + 10_000
    }
    assert rs.complete_many([(c, None) for c in small + big]) == [Commit.OK] * 20
    assert redis_client.exists(rs.keys.running, rs.keys.lease) == 0


def test_a_batch_stops_at_capacity_and_leaves_the_rest_due(rs, redis_client):
    for i in range(10):
        rs.add(spec(f"j{i}", After(0)))
    assert len(claim(rs, {"default": 4})) == 4
    assert redis_client.zcard(rs.keys.due("default")) == 6
    assert len(claim(rs, {"default": 100})) == 6


def test_stale_entries_in_a_batch_are_dropped_and_do_not_use_capacity(rs, redis_client):
    for i in range(6):
        rs.add(spec(f"j{i}", After(0)))
    for i in (0, 2, 4):
        assert rs.cancel(f"j{i}")
    # cancel removed their due entries; put stale ones back, as a racing writer could
    for i in (0, 2, 4):
        redis_client.zadd(rs.keys.due("default"), {f"000000000000|s|j{i}": 0})
    assert sorted(c.job_id for c in claim(rs, {"default": 3})) == ["j1", "j3", "j5"]
    assert redis_client.zcard(rs.keys.due("default")) == 0


def test_redis_py_resending_a_batch_claim_gets_the_same_claims(rs, redis_client):
    for i in range(5):
        rs.add(spec(f"j{i}", After(0)))
    first = raw(rs, "claim", "o1", "req-9", "10000", "*", "", "default", "100")
    again = raw(rs, "claim", "o1", "req-9", "10000", "*", "", "default", "100")
    assert first == again
    assert redis_client.hlen(rs.keys.running) == 5


def test_the_response_error_type_is_a_redis_response_error(rs):
    with pytest.raises(redis.ResponseError):
        raw(rs, "complete_many", "only-one-arg")
