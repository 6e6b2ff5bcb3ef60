"""Each Lua script alone, on a real Redis, with exact (fake-clock) time.

Scripts are called through ``RedisStore`` (told the time by a ``FakeClock``) or raw, as
``store._scripts[name](keys=[], args=[prefix, now_ms, ...])``, for ARGV edge cases. Redis
scripts do not roll back, so "bad input writes nothing" checks that every script validates
its input before its first write: the namespace's whole keyspace is compared before/after.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import pytest
import redis

from scheduler.model import After, At, Commit, Delivery, JobSpec, RetryPolicy, TaskRef
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.claiming.claim_reply import ClaimReply, claim_reply
from scheduler.stores.redis.protocol import gateway
from tests.conftest import START
from tests.helpers import every, read_job_hash, spec
from tests.lua.corruption import expand_entry

pytestmark = pytest.mark.redis

NOW = int(START * 1000)  # the fake clock's start, in ms
ALL = {"default": 100}
ADD_ARGV = {  # add.lua's ARGV[3..13], a valid one-off due now
    "job": "j",
    "def": "def-1",
    "lane": "default",
    "kind": "after",
    "num": "0",
    "anchor": "",
    "grace": "0",
    "misfire": "skip",
    "overlap": "skip",
    "delivery": "at_least_once",
    "stalls": "1",
}


# ---- helpers ----------------------------------------------------------------------------


def add_args(**change: str) -> list[str]:
    """add.lua's ARGV[3..13]: the valid ADD_ARGV with some fields changed."""
    return list({**ADD_ARGV, **change}.values())


def raw(rs: RedisStore, name: str, *args: Any, now: str | None = None) -> Any:
    """Run one script with exactly these ARGV[3..] (ARGV[2]: the fake clock unless given)."""
    argv = [rs.keys.prefix, rs._now_arg() if now is None else now, *args]
    return gateway.call(rs.redis, rs._scripts[name], [], argv)


def attempt(rs: RedisStore, name: str, *args: Any, now: str | None = None) -> Any:
    """``raw`` with an error reply returned as "ERROR: <message>" (short xfail reports)."""
    try:
        return raw(rs, name, *args, now=now)
    except redis.ResponseError as exc:
        return f"ERROR: {exc}"


def raw_claim(
    rs: RedisStore, req: str, lease: str = "10000", *pairs: str, owner: str = "o1"
) -> tuple[str, ClaimReply]:
    reply = raw(rs, "claim", owner, req, lease, "*", "", *(pairs or ("default", "100")))
    return reply, claim_reply(reply)


def claim(rs: RedisStore, caps: dict | None = None, lease: float | None = 10.0, owner: str = "o1"):
    return rs.claim_due(caps or ALL, lease, owner).claims


def dump(client: redis.Redis, prefix: str) -> dict:
    """Every key of the namespace with its full value (and TTL presence)."""
    out: dict = {}
    for key in sorted(client.keys(prefix.encode() + b"*")):
        kind = client.type(key)
        if kind == b"hash":
            value: Any = client.hgetall(key)
        elif kind == b"zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == b"list":
            value = client.lrange(key, 0, -1)
        elif kind == b"set":
            value = sorted(client.smembers(key))
        elif kind == b"stream":
            value = client.xrange(key)
        else:
            value = client.get(key)
        out[key.decode()] = (kind, value, client.pttl(key) > 0)
    return out


def changed(before: dict, after: dict) -> list[str]:
    """The keys (without the prefix) that a call created, deleted or modified."""
    return sorted(
        k.split(":", 2)[2] for k in before.keys() | after.keys() if before.get(k) != after.get(k)
    )


def entry(h: dict[str, str], job_id: str) -> str:
    """The due member of a job's pending occurrence (its hash keeps only the seq, ``e``)."""
    return f"{h['e']}|s|{job_id}"


def job(client: redis.Redis, rs: RedisStore, job_id: str) -> dict[str, str]:
    return read_job_hash(client, rs.keys.job(job_id))


def due(client: redis.Redis, rs: RedisStore, lane: str = "default") -> list[str]:
    return [m.decode() for m in client.zrange(rs.keys.due(lane), 0, -1)]


def entries(client: redis.Redis, rs: RedisStore) -> list[dict[str, str]]:
    """The stream's entries as stored (a batch script's entry holds several events)."""
    return [
        {k.decode(): v.decode() for k, v in fields.items()}
        for _, fields in client.xrange(rs.keys.events)
    ]


def events(client: redis.Redis, rs: RedisStore) -> list[dict[str, str]]:
    """The stream's events, each entry expanded through the store's one parser."""
    return [e for f in entries(client, rs) for e in expand_entry(f)]


def kinds(client: redis.Redis, rs: RedisStore) -> list[str]:
    return [e["kind"] for e in events(client, rs)]


def busy(rs: RedisStore) -> dict[str, str]:
    """A namespace with something of everything: a running claim (with a lease), a due and
    a later one-off, a recurring job, a pending retry and a paused job. Returns tokens."""
    rs.add(spec("run", After(0)))
    rs.add(spec("retry", After(0)))
    (c_run,) = claim(rs, {"default": 1})
    (c_retry,) = claim(rs, {"default": 1})
    assert rs.fail(c_retry, "boom", 60) is Commit.OK
    rs.add(spec("later", After(30)))
    rs.add(every("tick", 10))
    rs.add(spec("held", After(5)))
    assert rs.pause("held")
    rs.add(spec("due", After(0)))
    return {"tok": c_run.token}


# ---- bad input: an error reply, and nothing written ------------------------------------
# Every case runs on a busy() namespace; "{tok}" is the live token of the running claim.

BAD_INPUT = {
    "add-empty-id": ("add", add_args(job="")),
    "add-empty-def": ("add", add_args(**{"def": ""})),
    "add-empty-lane": ("add", add_args(lane="")),
    "add-num-not-a-number": ("add", add_args(num="soon")),
    "add-grace-not-a-number": ("add", add_args(grace="x")),
    "add-max-stalls-0": ("add", add_args(stalls="0")),
    "add-max-stalls-empty": ("add", add_args(stalls="")),
    "add-kind": ("add", add_args(kind="cron")),
    "add-interval-0": ("add", add_args(kind="every", num="0")),
    "add-interval-negative": ("add", add_args(kind="every", num="-5")),
    "add-anchor": ("add", add_args(kind="every", num="1000", anchor="yesterday")),
    "add-misfire": ("add", add_args(misfire="sometimes")),
    "add-overlap": ("add", add_args(overlap="maybe")),
    "add-delivery": ("add", add_args(delivery="exactly_once")),
    "add-existing-job-bad-delivery": ("add", add_args(job="later", delivery="")),
    "add-missing-argv": ("add", add_args()[:5]),
    "claim-empty-owner": ("claim", ["", "req", "10000", "*", "", "default", "1"]),
    "claim-empty-request": ("claim", ["o1", "", "10000"]),
    "claim-lease": ("claim", ["o1", "req", "long", "*", "", "default", "1"]),
    "claim-capacity": ("claim", ["o1", "req", "10000", "*", "", "default", "lots"]),
    "claim-capacity-missing": ("claim", ["o1", "req", "10000", "*", "", "default"]),
    "claim-tasks": ("claim", ["o1", "req", "10000", "a\nb", "", "default", "1"]),
    "claim-fences": ("claim", ["o1", "req", "10000", "*", "1,2", "default", "1"]),
    "renew-lease-0": ("renew", ["0", "{tok}"]),
    "renew-lease-negative": ("renew", ["-1", "{tok}"]),
    "renew-lease-empty": ("renew", ["", "{tok}"]),
    "renew-lease-not-a-number": ("renew", ["soon", "{tok}"]),
    "complete-empty-job": ("complete", ["", "{tok}", "1"]),
    "complete-empty-token": ("complete", ["run", "", "1"]),
    "fail-empty-job": ("fail", ["", "{tok}", "e", ""]),
    "fail-empty-token": ("fail", ["run", "", "e", ""]),
    "fail-retry-not-a-number": ("fail", ["run", "{tok}", "e", "later"]),
    "fail-interrupted-not-1": ("fail", ["run", "{tok}", "e", "", "", "yes"]),
    "fail-interrupted-with-a-retry": ("fail", ["run", "{tok}", "e", "1000", "", "1"]),
    "release-empty-job": ("release", ["", "{tok}"]),
    "release-empty-token": ("release", ["run", ""]),
    "cancel-empty-id": ("cancel", [""]),
    "pause-empty-id": ("pause", [""]),
    "resume-empty-id": ("resume", [""]),
    "add-cron-grace": ("add", add_args(job="later", kind="cron", num="5000", grace="-2")),
    "add-window": ("add", [*add_args(job="later", kind="every", num="1000"), "soon"]),
    "add-window-negative": ("add", [*add_args(job="later", kind="every", num="1000"), "-1"]),
    "plan-empty-job": ("plan", ["", "1", "000000000001", "1000", "after", "2000"]),
    "plan-mode": ("plan", ["j", "1", "000000000001", "1000", "sideways", "2000"]),
    "plan-occurrence": ("plan", ["j", "1", "000000000001", "1000", "after", "soon"]),
    "plan-replan-go": (
        "plan",
        ["j", "1", "000000000001", "1000", "replan", "2000", "yes", "3000", "", "", "", ""],
    ),
    "plan-replan-skip": (
        "plan",
        ["j", "1", "000000000001", "1000", "replan", "2000", "1", "3000", "1000", "", "", ""],
    ),
    "backfill-empty-job": ("backfill", ["", "1", "1000"]),
    "backfill-occurrence": ("backfill", ["j", "1", "yesterday"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_refused_and_writes_nothing(rs, redis_client, case):
    name, args = BAD_INPUT[case]
    tokens = busy(rs)
    before = dump(redis_client, rs.keys.prefix)
    reply = attempt(rs, name, *[a.format(**tokens) for a in args])
    assert str(reply).startswith("ERROR: duetime bad-input")
    assert changed(before, dump(redis_client, rs.keys.prefix)) == []


def test_bad_input_through_the_store_is_a_value_error(rs):
    with pytest.raises(ValueError, match="duetime bad-input"):
        rs.cancel("")


# ARGV[2] must be "" or an integer epoch ms (lua/include/core.lua), but no script validates it. Each
# case below would write something if its ARGV[2] were valid.
NOW_CASES = {
    "add": add_args(job="later"),
    "claim": ["o2", "req", "10000", "default", "100"],
    "renew": ["10000", "{tok}"],
    "complete": ["run", "{tok}", "1"],
    "fail": ["run", "{tok}", "e", "1000"],
    "release": ["run", "{tok}"],
    "cancel": ["later"],
    "pause": ["later"],
    "resume": ["held"],
}


@pytest.mark.parametrize("name", list(NOW_CASES))
def test_a_bad_now_override_writes_nothing(rs, redis_client, name):
    tokens = busy(rs)
    before = dump(redis_client, rs.keys.prefix)
    reply = attempt(rs, name, *[a.format(**tokens) for a in NOW_CASES[name]], now="noon")
    assert str(reply).startswith("ERROR: ")
    assert changed(before, dump(redis_client, rs.keys.prefix)) == []


@pytest.mark.parametrize("name", list(NOW_CASES))
def test_a_bad_now_override_is_bad_input(rs, name):
    tokens = busy(rs)
    reply = attempt(rs, name, *[a.format(**tokens) for a in NOW_CASES[name]], now="noon")
    assert str(reply).startswith("ERROR: duetime bad-input")


# Times and durations are integer ms, but Lua's tonumber() also accepts nan, inf and
# fractions, which pass validation and fail (or store garbage) after the first write.
NUMBERS = {
    "add-interval-nan": (
        "add",
        add_args(job="later", kind="every", num="nan"),
        "job:later is rewritten without a due entry, then a raw ZADD error",
    ),
    "add-at-inf": (
        "add",
        add_args(job="later", kind="at", num="inf"),
        "replaced; due_in and job.next are -2^63",
    ),
    "add-interval-inf": (
        "add",
        add_args(job="later", kind="every", num="inf"),
        "replaced; due_in and job.next are -2^63",
    ),
    "add-grace-nan": ("add", add_args(job="later", grace="nan"), "replaced with a garbage grace"),
    "claim-lease-0": (
        "claim",
        ["o2", "req", "0", "default", "100"],
        "claims are written, then SET PX 0 fails: the reply is lost",
    ),
    "claim-lease-negative": (
        "claim",
        ["o2", "req", "-5", "default", "100"],
        "claims are written, then SET PX fails: the reply is lost",
    ),
    "claim-lease-fraction": (
        "claim",
        ["o2", "req", "1.5", "default", "100"],
        "claims are written, then SET PX fails: the reply is lost",
    ),
    "claim-capacity-fraction": (
        "claim",
        ["o2", "req", "10000", "default", "1.5"],
        "a raw ZRANGEBYSCORE LIMIT error",
    ),
    "renew-lease-nan": ("renew", ["nan", "{tok}"], "a raw ZADD error"),
    "fail-retry-nan": (
        "fail",
        ["run", "{tok}", "e", "nan"],
        "the claim is dropped, then a raw ZADD error: the invocation is lost",
    ),
}


@pytest.mark.parametrize("case", list(NUMBERS))
def test_non_integer_numbers_are_bad_input(rs, redis_client, case):
    name, args, _ = NUMBERS[case]
    tokens = busy(rs)
    before = dump(redis_client, rs.keys.prefix)
    reply = attempt(rs, name, *[a.format(**tokens) for a in args])
    assert str(reply).startswith("ERROR: duetime bad-input")
    assert changed(before, dump(redis_client, rs.keys.prefix)) == []


# ---- add ----------------------------------------------------------------------------------


def test_add_created(rs, redis_client):
    assert raw(rs, "add", *add_args(num="5000")) == ["created", 5000, 0, 1]  # seq 0 -> 1
    h = job(redis_client, rs, "j")
    assert h["next"] == str(NOW + 5000) and h["gen"] == "1" and "running" not in h
    assert due(redis_client, rs) == [entry(h, "j")]
    assert redis_client.zscore(rs.keys.due("default"), entry(h, "j")) == NOW + 5000
    assert events(redis_client, rs)[-1]["detail"] == "created"


@pytest.mark.parametrize(
    ("rt", "keep"),
    [
        ("1.5", "1500"),  # seconds to ms, rounded
        ("2592000", "2592000000"),  # 30 days: the longest
        ("0.5", None),  # under a second: no keep
        ("2592001", None),  # over 30 days: none
        ("1.2.3", None),  # not a number
        ("", None),  # nothing after the name
    ],
)
def test_add_writes_keep_from_a_definitions_result_ttl_in_range_only(rs, redis_client, rt, keep):
    """The definition is opaque to add.lua but for its result TTL (``"rt"``, seconds),
    written as the job's ``keep`` (ms) only when it is in RULE.keep's range."""
    text = '{"rt":' + rt + ',"s":["after",5.0],"t":"t.x"}'
    assert raw(rs, "add", *add_args(**{"def": text}))[0] == "created"
    assert job(redis_client, rs, "j").get("keep") == keep


def test_add_unchanged_keeps_the_pending_entry_and_anchor(rs, clock, redis_client):
    assert rs.add(every("t", 10)).outcome == "created"
    h1 = job(redis_client, rs, "t")
    members = due(redis_client, rs)
    clock.advance(3)
    res = rs.add(every("t", 10))
    assert (res.outcome, res.due_in) == ("unchanged", pytest.approx(7))
    h2 = job(redis_client, rs, "t")
    for field in ("e", "anchor", "next", "gen", "k"):
        assert h2[field] == h1[field], field
    assert due(redis_client, rs) == members
    assert redis_client.get(rs.keys.prefix + "gen") == b"1"


def test_add_replaced_removes_the_old_entry_and_bumps_the_generation(rs, clock, redis_client):
    rs.add(every("t", 10))
    old = job(redis_client, rs, "t")
    assert rs.add(every("t", 20)).outcome == "replaced"
    new = job(redis_client, rs, "t")
    assert int(new["gen"]) > int(old["gen"])
    assert entry(old, "t") not in due(redis_client, rs)
    assert due(redis_client, rs) == [entry(new, "t")]
    assert rs.add(every("t", 20, lane="other")).outcome == "replaced"  # moved to a lane
    assert due(redis_client, rs) == []
    assert due(redis_client, rs, "other") == [entry(job(redis_client, rs, "t"), "t")]
    assert int(job(redis_client, rs, "t")["gen"]) > int(new["gen"])


def test_add_after_cancel_is_created_again(rs, redis_client):
    rs.add(spec("a", After(5)))
    assert rs.cancel("a")
    assert rs.add(spec("a", After(5))).outcome == "created"
    assert redis_client.pttl(rs.keys.job("a")) == -1  # no retention TTL left over


# ---- claim --------------------------------------------------------------------------------


def test_claim_resend_returns_the_same_reply_and_claims_nothing_new(rs, clock, redis_client):
    rs.add(spec("a", After(0)))
    rs.add(with_args("é 😀", text="ü"))  # lengths are bytes: non-ASCII ids and args
    rs.add(spec("c", At(NOW / 1000 - 1)))
    first, body = raw_claim(rs, "req-1")
    assert [c[0] for c in body.claims] == ["c", "a", "é 😀"]
    # the resend record is the reply itself, not a second copy of it
    assert redis_client.get(rs.keys.prefix + "claimed:o1").decode() == first
    fence = redis_client.get(rs.keys.prefix + "fence")
    running = redis_client.hgetall(rs.keys.running)
    rs.add(spec("b", After(0)))
    clock.advance(1)
    again, _ = raw_claim(rs, "req-1")
    assert again == first
    assert redis_client.get(rs.keys.prefix + "fence") == fence
    assert redis_client.hgetall(rs.keys.running) == running
    _, fresh = raw_claim(rs, "req-2")  # a new request id is a new claim
    assert [c[0] for c in fresh.claims] == ["b"]


def with_args(job_id: str, **kwargs: str) -> JobSpec:
    return JobSpec(job_id, TaskRef("tests.noop", json.dumps(kwargs)), After(0))


def test_the_claim_reply_parses_back_into_what_was_claimed(rs, clock):
    rs.add(spec("a", After(0)))
    rs.add(with_args("é 😀", text="ü\n|x"))
    _, body = raw_claim(rs, "req-1")
    assert (body.now, body.next, body.fence, body.lease_until) == (NOW, NOW + 10000, 0, NOW + 10000)
    (job_a, *_), (job_b, sched, attempt, fence, gen, ready, text) = body.claims
    assert (job_a, job_b, sched, attempt, fence, ready) == ("a", "é 😀", NOW, 1, 2, NOW)
    assert rs.spec_of(job_b, text) == with_args("é 😀", text="ü\n|x")
    assert gen > 0 and body.epoch == "" and body.plans == []


def test_an_earlier_versions_resend_record_still_parses():
    """A resend record written before the flat reply ("<req>\\n<JSON>") is what claim.lua
    returns for that request; the parser reads it."""
    old = (
        'req-1\n{"now":5,"next":-1,"fence":3,"epoch":"e","plan":{},"claims":[{"j":"a","s":4,'
        '"a":1,"t":"o1:4","f":4,"l":105,"g":"7","def":"{}","r":5}]}'
    )
    got = claim_reply(old)
    assert got == ClaimReply(5, -1, 3, 105, "e", [("a", 4, 1, 4, 7, 5, "{}")], [])


def test_fences_strictly_increase_and_tokens_are_unique(rs, clock):
    seen = []
    for i in range(3):
        for n in range(3):
            rs.add(spec(f"j{i}{n}", After(0)))
        seen += claim(rs, owner=f"o{i % 2}")
        clock.advance(1)
    fences = [c.fence for c in seen]
    assert len(seen) == 9
    assert fences == sorted(fences) and len(set(fences)) == 9
    assert len({c.token for c in seen}) == 9


def test_next_is_minus_one_with_nothing_pending(rs):
    _, body = raw_claim(rs, "r", "")
    assert body.next == -1 and body.now == NOW
    assert not body.claims


def test_claims_are_bounded_by_the_capacity_of_each_lane(rs):
    for lane in ("a", "b", "c"):
        for i in range(5):
            rs.add(spec(f"{lane}{i}", After(0), lane=lane))
    got = claim(rs, {"a": 2, "b": 3})
    assert sorted(c.job_id for c in got) == ["a0", "a1", "b0", "b1", "b2"]
    assert claim(rs, {"a": 0, "c": 1})[0].job_id == "c0"


# ---- renew / complete / fail / release ----------------------------------------------------

COMMITS = {
    "complete": lambda rs, c: raw(rs, "complete", c.job_id, c.token, "null"),
    "fail": lambda rs, c: raw(rs, "fail", c.job_id, c.token, "boom", ""),
    "release": lambda rs, c: raw(rs, "release", c.job_id, c.token),
    "renew": lambda rs, c: raw(rs, "renew", "10000", c.token)[0],
}


@pytest.mark.parametrize("op", list(COMMITS))
def test_a_wrong_token_is_lease_lost(rs, redis_client, op):
    rs.add(spec("a", After(0)))
    (c,) = claim(rs)
    before = dump(redis_client, rs.keys.prefix)
    assert COMMITS[op](rs, c._replace(token="o1:999")) == "lease_lost"
    assert changed(before, dump(redis_client, rs.keys.prefix)) == []
    assert COMMITS[op](rs, c) == "ok"  # the right token still owns it


@pytest.mark.parametrize("op", ["complete", "fail", "release"])
def test_another_jobs_token_is_lease_lost(rs, redis_client, op):
    rs.add(spec("a", After(0)))
    rs.add(spec("b", After(0)))
    ca, cb = claim(rs)
    before = dump(redis_client, rs.keys.prefix)
    assert COMMITS[op](rs, cb._replace(token=ca.token)) == "lease_lost"
    assert changed(before, dump(redis_client, rs.keys.prefix)) == []


@pytest.mark.parametrize("op", ["complete", "fail", "release"])
def test_an_unknown_job_is_not_found(rs, redis_client, op):
    rs.add(spec("a", After(0)))
    (c,) = claim(rs)
    before = dump(redis_client, rs.keys.prefix)
    assert COMMITS[op](rs, c._replace(job_id="ghost", token="o1:999")) == "not_found"
    assert changed(before, dump(redis_client, rs.keys.prefix)) == []


def test_a_resent_complete_is_ok_and_counts_once(rs, redis_client):
    rs.add(spec("a", After(0)))
    (c,) = claim(rs)
    assert COMMITS["complete"](rs, c) == "ok"
    stream = redis_client.xlen(rs.keys.events)
    assert COMMITS["complete"](rs, c) == "ok"
    assert job(redis_client, rs, "a")["runs"] == "1"
    assert redis_client.xlen(rs.keys.events) == stream  # no second "succeeded"


@pytest.mark.parametrize("op", ["complete", "fail", "release", "renew"])
def test_at_the_lease_deadline_the_lease_is_lost(rs, clock, redis_client, op):
    rs.add(spec("a", After(0)))
    (c,) = claim(rs, lease=5)
    clock.advance(5)
    assert COMMITS[op](rs, c) == "lease_lost"
    assert redis_client.hexists(rs.keys.running, c.token)  # left for the reaper


def test_renew_before_the_deadline_extends_it_and_after_it_is_lease_lost(rs, clock, redis_client):
    rs.add(spec("a", After(0)))
    (c,) = claim(rs, lease=5)
    clock.advance(4.999)
    assert raw(rs, "renew", "5000", c.token, "o1:999") == ["ok", "lease_lost"]
    assert redis_client.zscore(rs.keys.lease, c.token) == NOW + 4999 + 5000
    clock.advance(5.001)
    assert raw(rs, "renew", "5000", c.token) == ["lease_lost"]


# ---- reaping expired leases --------------------------------------------------------------


def test_an_expired_lease_is_reclaimed_with_attempt_2_and_a_higher_fence(rs, clock):
    rs.add(spec("a", After(0)))
    (c1,) = claim(rs, lease=5)
    clock.advance(5)
    (c2,) = claim(rs, lease=5, owner="o2")
    assert (c2.job_id, c2.attempt, c2.scheduled) == ("a", 2, c1.scheduled)
    assert c2.fence > c1.fence and c2.token != c1.token
    assert rs.complete(c1, None) is Commit.LEASE_LOST
    assert rs.complete(c2, None) is Commit.OK


def test_at_most_once_is_abandoned_and_never_reclaimed(rs, clock, redis_client):
    rs.add(spec("a", After(0), delivery=Delivery.AT_MOST_ONCE))
    claim(rs, lease=5)
    clock.advance(5)
    assert claim(rs, lease=5) == []
    clock.advance(100)
    assert claim(rs, lease=5) == []
    assert kinds(redis_client, rs)[-2:] == ["lease_lost", "abandoned"]
    assert job(redis_client, rs, "a")["state"] == "abandoned"
    assert redis_client.hlen(rs.keys.running) == 0


def test_max_stalls_lease_losses_end_in_a_dead_letter(rs, clock, redis_client):
    rs.add(spec("a", After(0), retry=RetryPolicy(max_stalls=2)))
    assert [c.attempt for c in claim(rs, lease=5)] == [1]
    clock.advance(5)
    assert [c.attempt for c in claim(rs, lease=5)] == [2]
    clock.advance(5)
    assert claim(rs, lease=5) == []
    (letter,) = [json.loads(x) for x in redis_client.lrange(rs.keys.dead("a"), 0, -1)]
    assert letter == {"at": NOW + 10000, "sched": NOW, "attempt": 2, "reason": "lease lost"}
    assert kinds(redis_client, rs).count("lease_lost") == 2
    assert "dead_lettered" in kinds(redis_client, rs)
    clock.advance(100)
    assert claim(rs, lease=5) == []


# ---- cancel -------------------------------------------------------------------------------


def test_cancel_returns_1_then_0(rs, clock):
    rs.add(spec("a", After(5)))
    assert raw(rs, "cancel", "a") == 1
    assert raw(rs, "cancel", "a") == 0
    assert raw(rs, "cancel", "never-added") == 0
    clock.advance(5)
    assert claim(rs) == []


def test_cancel_prevents_a_pending_retry(rs, clock, redis_client):
    rs.add(spec("a", After(0)))
    (c,) = claim(rs)
    assert rs.fail(c, "boom", 10) is Commit.OK
    retry = due(redis_client, rs)
    assert len(retry) == 1 and "|r|" in retry[0]
    assert raw(rs, "cancel", "a") == 1
    clock.advance(10)
    assert claim(rs) == []
    assert due(redis_client, rs) == []  # the stale retry entry was dropped
    clock.advance(100)
    assert claim(rs) == []


def test_an_interrupted_invocation_writes_no_failure_and_no_dead_letter(rs, clock, redis_client):
    """fail.lua with ARGV[8] "1" (an operator's interrupt, after cancel.lua): the RUNNING
    entry and lease go, one ``interrupted`` event and its counter, no failure counted, no
    dead letter (nor a dead-jobs entry), the last error untouched; a recurring job's run
    list says interrupted, and the jobs retire as cancelled. A call without ARGV[8] (an
    older replica's) still records a failure."""
    rs.add(spec("a", After(0), retry=RetryPolicy(max_attempts=3)))
    rs.add(every("r", 1))
    clock.advance(1)
    by_id = {c.job_id: c for c in claim(rs)}
    raw(rs, "cancel", "a")
    raw(rs, "cancel", "r")
    for j in "ar":
        assert raw(rs, "fail", j, by_id[j].token, "stopped", "", "", "1") == "ok"
    assert redis_client.hlen(rs.keys.running) == 0 and redis_client.zcard(rs.keys.lease) == 0
    for j in "ar":
        h = job(redis_client, rs, j)
        assert h["state"] == "cancelled" and h["last_token"] == by_id[j].token, h
        assert "failures" not in h and "last_error" not in h and "last_tb" not in h, h
        assert not redis_client.exists(rs.keys.dead(j))
    assert redis_client.zcard(rs.keys.dead_jobs) == 0
    assert [(e["kind"], e["job"], e["detail"]) for e in events(redis_client, rs)][-2:] == [
        ("interrupted", "a", "stopped"),
        ("interrupted", "r", "stopped"),
    ]
    assert not {"failed", "dead_lettered", "retried"} & set(kinds(redis_client, rs))
    assert redis_client.hget(rs.keys.stats, "interrupted") == b"2"
    (run,) = redis_client.lrange(rs.keys.runs("r"), 0, -1)
    assert run.decode().endswith("|interrupted")
    clock.advance(60)
    assert claim(rs) == []
    rs.add(spec("b", After(0)))
    (c,) = claim(rs)
    raw(rs, "cancel", "b")
    assert raw(rs, "fail", "b", c.token, "stopped", "", "") == "ok"  # seven ARGV: a failure
    assert job(redis_client, rs, "b")["failures"] == "1" and redis_client.exists(rs.keys.dead("b"))


# ---- malformed data -----------------------------------------------------------------------


def test_malformed_due_entries_are_quarantined_and_good_jobs_still_claimed(rs, clock, redis_client):
    rs.add(spec("good", After(1)))
    lane = rs.keys.due("default")
    # at the same due time; "!!!" sorts before the good member, the rest after it
    garbage = ["!!!", "zzz", "00ff|r|x|y|z|w|good", "00ff|q|good"]
    redis_client.zadd(lane, {m: NOW + 1000 for m in garbage})
    ghosts = ["00000000000000fe|r|1|5|1|0|ghost", "00000000000000ff|s|ghost"]
    redis_client.zadd(lane, {m: NOW for m in ghosts})  # point to a job that does not exist
    clock.advance(1)
    assert [c.job_id for c in claim(rs, {"default": 1})] == ["good"]

    def records() -> dict[str, dict]:
        got = redis_client.hgetall(rs.keys.quarantined)
        return {k.decode(): json.loads(v) for k, v in got.items()}

    entry = {m: "m:" + hashlib.sha1(m.encode()).hexdigest()[:16] for m in garbage}
    assert list(records()) == [entry["!!!"]]
    assert claim(rs) == []  # the rest, with capacity to spare
    assert due(redis_client, rs) == []
    assert sorted(records()) == sorted(entry.values())
    for m, rec in ((m, records()[entry[m]]) for m in garbage):
        assert rec == {
            "id": entry[m],
            "job": "",
            "reason": "malformed due entry",
            "at": NOW + 1000,
            "by": "claim",
            "member": m,
            "lane": "default",
            "score": NOW + 1000,
            "type": "",
            "running": "",
            "token": "",
        }
    quarantined = [e for e in events(redis_client, rs) if e["kind"] == "quarantined"]
    assert [e["detail"] for e in quarantined] == ["malformed due entry"] * len(garbage)
    assert redis_client.hget(rs.keys.stats, "quarantined") == str(len(garbage)).encode()
    assert not redis_client.exists(rs.keys.quarantine)  # the legacy list is no longer written
    assert not redis_client.exists(rs.keys.job("ghost"))
    assert redis_client.exists(rs.keys.job("good"))  # "00ff|r|x|y|z|w|good" names it: untouched


# ---- the event stream ---------------------------------------------------------------------


def test_the_event_stream_records_every_transition_readably(rs, clock, redis_client):
    rs.add(spec("ok", After(0)))
    rs.add(spec("bad", After(0)))
    rs.add(spec("gone", After(5)))
    rs.add(spec("lost", After(0)))
    got = {c.job_id: c for c in claim(rs, lease=5)}
    assert rs.complete(got["ok"], {"n": 1}) is Commit.OK
    assert rs.fail(got["bad"], "boom", 0) is Commit.OK
    (again,) = claim(rs, {"default": 1}, lease=5)
    assert rs.fail(again, "boom twice", None) is Commit.OK
    assert rs.cancel("gone")
    clock.advance(5)
    claim(rs, lease=5)
    raw_entries = entries(redis_client, rs)
    for f in raw_entries:  # one change, or one batch script call's changes of one kind
        if "batch" in f:
            assert set(f) == {"kind", "detail", "at", "n", "batch"}
            lines = f["batch"].split("\n")
            assert int(f["n"]) == len(lines) > 1
            assert all(re.fullmatch(r"\d+\|\d+\|\d*\|.+", line) for line in lines)
        else:
            # a claim made later than its scheduled time also says when it became claimable
            extra = {"ready"} if f["kind"] == "claimed" and "ready" in f else set()
            assert set(f) == {"kind", "job", "sched", "attempt", "detail", "at"} | extra
    assert any("batch" in f for f in raw_entries)  # the first claim's three
    evs = [e for f in raw_entries for e in expand_entry(f)]
    assert {
        "scheduled",
        "claimed",
        "succeeded",
        "failed",
        "retried",
        "cancelled",
        "lease_lost",
        "dead_lettered",
    } <= {e["kind"] for e in evs}
    for e in evs:
        assert e["at"].isdigit() and NOW <= int(e["at"]) <= NOW + 5000
        assert e["sched"] == "" or e["sched"].isdigit()
        assert e["attempt"] == "" or e["attempt"].isdigit()
    by = {(e["kind"], e["job"]): e for e in evs}
    assert by[("claimed", "ok")] == {
        "kind": "claimed",
        "job": "ok",
        "sched": str(NOW),
        "attempt": "1",
        "detail": "o1",
        "at": str(NOW),
    }
    assert by[("retried", "bad")]["detail"] == "boom"
    assert by[("failed", "bad")]["attempt"] == "2"
    assert by[("failed", "bad")]["detail"] == "boom twice"
    assert by[("lease_lost", "lost")]["at"] == str(NOW + 5000)
    stats = {k.decode(): int(v) for k, v in redis_client.hgetall(rs.keys.stats).items()}
    for kind in ("claimed", "succeeded", "failed", "scheduled"):
        assert stats.get(kind, 0) == sum(e["kind"] == kind for e in evs), kind
    assert [e.kind for e in rs.events(1000)] == [e["kind"] for e in evs]
    assert len(rs.events(2)) == 2 and rs.events(2) == rs.events(1000)[-2:]


# ---- a server without the libraries or scripts ------------------------------------------


def libraries(client: Any) -> list[str]:
    """The names of the Redis Functions libraries loaded on ``client``'s server."""
    out = []
    for lib in client.function_list():
        fields = lib if isinstance(lib, dict) else dict(zip(lib[::2], lib[1::2], strict=True))
        out.append(fields.get("library_name") or fields.get(b"library_name"))
    return [x.decode() if isinstance(x, bytes) else x for x in out]


def test_the_store_survives_a_function_flush(private_redis, clock):
    """FUNCTION FLUSH (or a new server): the library the call names is loaded, the call sent
    again."""
    rs = RedisStore(private_redis.url, "noscript", clock=clock)
    try:
        rs.add(spec("a", After(0)))
        client = redis.Redis.from_url(private_redis.url, decode_responses=True)
        client.function_flush()
        assert libraries(client) == []
        assert [c.job_id for c in claim(rs)] == ["a"]  # "Function not found": loaded
        assert rs._scripts["claim"].function in libraries(client)
        assert rs.add(spec("b", After(0))).outcome == "created"
        client.close()
    finally:
        rs.close()


@pytest.mark.parametrize(
    "refused",
    [
        "ERR unknown command 'FCALL', with args beginning with: ",
        "NOPERM User u has no permissions to run the 'fcall' command",
    ],
)
def test_a_server_that_refuses_fcall_is_sent_scripts(private_redis, clock, refused):
    """A server without Redis Functions (Redis 6), or an ACL without ``fcall``: the call did
    not run; the client sends scripts from then on (EVALSHA, loaded after a NOSCRIPT)."""
    rs = RedisStore(private_redis.url, "old", clock=clock)
    sent = []
    real = rs.redis.execute_command

    def server(*args, **kwargs):  # type: ignore[no-untyped-def]
        if args[0] in ("FCALL", "EVALSHA"):
            sent.append(args[0])
        if args[0] == "FCALL":
            raise redis.ResponseError(refused)
        return real(*args, **kwargs)

    try:
        client = redis.Redis.from_url(private_redis.url)
        client.script_flush()
        rs.redis.execute_command = server  # type: ignore[method-assign]
        assert rs.add(spec("a", After(0))).outcome == "created"
        assert [c.job_id for c in claim(rs)] == ["a"]
        assert sent[:3] == ["FCALL", "EVALSHA", "EVALSHA"]  # refused, NOSCRIPT, run
        assert "FCALL" not in sent[3:]
        client.close()
    finally:
        rs.close()


def test_the_store_survives_a_script_flush_when_sending_scripts(private_redis, clock):
    rs = RedisStore(private_redis.url, "noscript", clock=clock)
    gateway.send_scripts(rs.redis)  # as after a server refused FCALL
    try:
        rs.add(spec("a", After(0)))
        client = redis.Redis.from_url(private_redis.url)
        client.script_flush()
        assert client.script_exists(rs._scripts["claim"].sha) == [False]
        assert [c.job_id for c in claim(rs)] == ["a"]  # NOSCRIPT: loaded, sent again
        assert client.script_exists(rs._scripts["claim"].sha) == [True]
        assert rs.add(spec("b", After(0))).outcome == "created"
        client.close()
    finally:
        rs.close()
