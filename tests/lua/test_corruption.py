"""The corruption suite (issue 12): one corrupt item never takes other jobs with it.

Each example builds a fresh namespace of good jobs (one-offs, and fixed-rate series) due
at the same ms in one lane, plants ONE corrupt item among them (hypothesis generates it),
and calls a script on them: claim (3 replicas claiming in turn), the reaper (a claim after
the leases expired), complete, complete_many, fail, release, cancel, pause, resume,
trigger, plan, backfill, add on the corrupt job's id. The corrupt items:

* the job key of another TYPE (string, list, set, zset, stream);
* a hash field that a script parses set to text, empty, negative, huge (1e30, 40 digits),
  NaN-like ("nan", "inf", "0x10", "1.5"), random text or bytes; a missing field;
* an oversize field (over 1 KiB; a definition over DEF_MAX = 1 MiB: 1-3 MB here, not
  100 MB, to keep it fast: the scripts only compare sizes);
* a definition that Lua passes but the replica cannot decode: not JSON, not an object,
  arguments that are not JSON or not an object, an unknown schedule kind;
* a due member that does not parse; a RUNNING entry that does not parse, or a lease whose
  RUNNING entry is missing; the job's list of dead letters or skipped ranges of another type.

Around every script call the whole namespace is dumped (every key: TYPE and full value,
tests/lua/corruption.py) and the difference attributed to items. Required: each item
shows either no change or exactly one whole effect (below); nothing changes that no item
explains; the stream and the counters agree (stats delta = events written, per kind); the
corrupt item is moved aside whole (its record once, with the reason the oracle expects,
its data kept as it was, one `quarantined` event); every reply is the one the caller
expects; then the caller keeps working: the good jobs are claimed and completed, each
exactly once (none lost, doubled or left half-claimed).

Whole effects: claimed = a due member gone + RUNNING entry + lease + job hash + `claimed`
event (+ the next due member of a series); reaped = RUNNING entry and lease gone + job
hash + a retry due + `lease_lost`; completed = RUNNING entry and lease gone + job hash +
`succeeded`; failed, released likewise; moved aside = its due member / RUNNING entry /
lease gone + job key gone + quarantined:<id> holding the key as it was + its record + one
`quarantined` event.

Sizes: the fast subset (default run) draws FAST_EXAMPLES = 25 corruptions per script (13
scripts) with FAST_GOOD = 6 good jobs each, plus 13 oversize fields: 338 items, 1,809
script calls checked, 2,063 good jobs followed to their end, about 8 s. The full matrix
(``-m corruption_full``) draws FULL_EXAMPLES = 150 per script with FULL_GOOD = 30 good
jobs, plus 39 oversize fields: 1,989 items, 22,854 calls, 59,840 good jobs, about 4 min
(test_corrupt_namespace.py adds 92 / 472 namespace-key cases). Set
$DUETIME_CORRUPTION_STATS to a file to get these counts for a run.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import re
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from scheduler.model import After, Cron, Every
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.claiming.claim_reply import RawClaim, claim_reply
from scheduler.stores.redis.protocol import definitions, gateway, records
from scheduler.testing import FakeClock
from tests.helpers import spec, write_job_field
from tests.lua.corruption import (
    DEF_MAX,
    FIELD_MAX,
    Diff,
    diff,
    dump,
    entry_id,
    job_problem,
    lua_list,
    parse_member,
    parse_running,
    planted,
    read_lists,
)

pytestmark = pytest.mark.redis

FAST_EXAMPLES, FAST_GOOD = 25, 6
FULL_EXAMPLES, FULL_GOOD = 150, 30
# One full test (150 examples of one script) took 20 s to over 120 s, the suite's default
# timeout, on the 2-core boxes this was run on: the full matrix gets its own bound.
FULL_TIMEOUT = 1800
START = 1_000.0  # the fake clock's start (s)
LEASE = "10000"  # ms
SERIES = 2  # of the good jobs, fixed-rate series (the rest one-offs)

LUA = pathlib.Path(__file__).resolve().parents[2] / "lua"
INC = LUA / "include"
_COMMIT = lua_list((INC / "commit.lua").read_text(), "COMMIT_FIELDS")
READS = {  # what each script parses of the job it meets, read from the Lua itself
    "claim": lua_list((INC / "inspect.lua").read_text(), "CLAIM_FIELDS"),
    "reap": lua_list((INC / "reap.lua").read_text(), "REAP_FIELDS"),
    "complete": _COMMIT,
    "complete_many": _COMMIT,
    "fail": _COMMIT,
    "release": _COMMIT,
    "add": lua_list((INC / "replace.lua").read_text(), "OLD_FIELDS"),
    **{
        name: read_lists((LUA / f"{name}.lua").read_text())[0]
        for name in ("cancel", "pause", "resume", "trigger", "plan", "backfill")
    },
}
# complete_many reads these only for a job holding a queued occurrence (its release parses them)
_QUEUED = re.search(r"local QUEUED_ONLY = \{([^}]*)\}", (INC / "commit.lua").read_text())
_QUEUED_ONLY = re.findall(r"(\w+) = true", _QUEUED[1] if _QUEUED else "")
_CLAIM_MORE = {  # claim reads these only for a recurring job, or a paused one-off
    "series": lua_list((INC / "inspect.lua").read_text(), "SERIES_FIELDS"),
    "paused": lua_list((INC / "inspect.lua").read_text(), "PAUSED_FIELDS"),
}


def reads(script: str, h: dict[bytes, bytes]) -> list[str]:
    """The fields ``script`` parses of a job hash ``h`` (claim: more for some jobs)."""
    names = READS[script]
    if script == "complete_many" and not h.get(b"queued"):
        return [n for n in names if n not in _QUEUED_ONLY]
    if script == "claim" and h.get(b"kind") in (b"every", b"cron"):
        return names + _CLAIM_MORE["series"]
    if script == "claim" and h.get(b"paused") == b"1":
        return names + _CLAIM_MORE["paused"]
    return names


SIDE = {"reap": "dead", "fail": "dead", "plan": "skips", "backfill": "skips"}  # + claim: skips
CLAIM_LIKE = ["claim", "reap"]
COMMITS = ["complete", "complete_many", "fail", "release"]
SINGLE = ["cancel", "pause", "resume", "trigger", "plan", "backfill", "add"]
SCRIPTS = CLAIM_LIKE + COMMITS + SINGLE

CLAIMED = {"due-", "hash", "running+", "lease+", "ev:claimed"}
REAPED = {"running-", "lease-", "hash", "due+", "ev:lease_lost"}
DONE = {
    "complete": {"running-", "lease-", "hash", "ev:succeeded"},
    "fail": {"running-", "lease-", "hash", "dead", "ev:failed", "ev:dead_lettered"},
    "release": {"running-", "lease-", "hash", "due+", "ev:released"},
}
DONE["complete_many"] = DONE["complete"]
ASIDE = {"record", "ev:quarantined"}
ASIDE_JOB = ASIDE | {"jobkey-", "data+"}
ANSWER = {"cancel": 0, "pause": 0, "resume": 0, "trigger": 0, "plan": 0, "backfill": -1}

_client: dict[str, tuple[redis.Redis, redis.Redis]] = {}
# what a run checked: corrupt items planted, script calls compared, good jobs followed to
# their end (written to $DUETIME_CORRUPTION_STATS, if set, when the module is done)
TALLY: Counter[str] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _tally():
    yield
    path = os.environ.get("DUETIME_CORRUPTION_STATS")
    if path and TALLY:
        with open(path, "a") as out:
            out.write(json.dumps(dict(TALLY)) + "\n")


def clients(url: str) -> tuple[redis.Redis, redis.Redis]:
    """(text, bytes) clients on the session's server, shared by the examples."""
    if url not in _client:
        _client[url] = (
            redis.Redis.from_url(url, decode_responses=True),
            redis.Redis.from_url(url),
        )
    return _client[url]


# ---- a namespace under test ---------------------------------------------------------


@dataclass
class World:
    rs: RedisStore
    r: redis.Redis  # bytes replies, for the dumps
    clock: FakeClock
    good: list[str]
    series: set[str]
    bad: str = "bad"
    tokens: dict[str, str] = field(default_factory=dict)  # job -> its live claim's token
    diffs: list[Diff] = field(default_factory=list)
    replies: list[Any] = field(default_factory=list)
    bad_member: str = ""  # the bad job's due member, and its score, as added
    bad_due: float = -1
    bad_series: bool = False
    moved: Counter[str] = field(default_factory=Counter)  # entry id -> times moved aside

    @property
    def prefix(self) -> str:
        return self.rs.keys.prefix

    def raw(self, name: str, *args: Any) -> Any:
        argv = [self.prefix, self.rs._now_arg(), *args]
        return gateway.call(self.rs.redis, self.rs._scripts[name], [self.rs.keys.epoch], argv)

    def key(self, family: str) -> bytes:
        return (self.prefix + family).encode()

    def call(
        self,
        allowed: dict[str, list[set[str]]],
        by: str,
        fn: Callable[[], Any],
        claimed_first: frozenset[str] = frozenset(),
    ) -> tuple[Any, Diff]:
        """Run ``fn`` between two dumps of the namespace and check the difference: each
        item either unchanged or exactly one of its ``allowed`` whole effects; nothing
        left unexplained; counters = events; every record moved aside whole (as it was
        before the call; ``claimed_first``: as the claim in ``fn`` left it)."""
        before = dump(self.r, self.prefix)
        reply = fn()
        self.replies.append(reply)
        after = dump(self.r, self.prefix)
        d = diff(before, after)
        TALLY["calls"] += 1
        assert d.loose == [], d.loose
        assert d.stats == Counter(e["kind"] for e in d.events), (d.stats, d.events)
        for item in d.effects:
            got = d.of(item)
            assert got in allowed.get(item, []), f"{by}: {item} changed by {sorted(got)}"
        for rid, rec in d.records.items():
            self.moved[rid] += 1
            assert (
                rec["id"] == rid and rec["by"] == by and rec["at"] == int(self.clock.now() * 1000)
            )
            if "data+" in d.of(rid):  # the raw data kept whole, as it was before the call
                was = before[f"job:{rec['job']}"]
                if rid in claimed_first:  # claim.lua's writes, then quarantine.lua's rename
                    h = records.job_hash(was[1])
                    if h[b"kind"] not in (b"after", b"at"):
                        continue  # a series: its next occurrence and `started` were written too
                    running = str(int(h.get(b"running", b"0")) + 1).encode()  # no `started`
                    stored = planted(planted(was[1], "running", running), "attempts", b"1")
                    was = ("hash", planted(stored, "e", b""))
                assert after[f"quarantined:{rid}"] == was, rid
                assert rec["type"] == was[0]
        self.diffs.append(d)
        return reply, d


def world(url: str, n_good: int, bad: Any, pos: int) -> World:
    """``n_good`` good jobs (SERIES of them fixed-rate) and the job "bad" (schedule
    ``bad``, or none) added in FIFO order at position ``pos``, all due now."""
    text, raw = clients(url)
    clock = FakeClock(START)
    rs = RedisStore(text, f"c{uuid.uuid4().hex[:10]}", clock=clock)
    good = [f"g{i:02d}" for i in range(n_good - SERIES)] + [f"s{i}" for i in range(SERIES)]
    specs = [
        spec(j, Every(60, anchor=START) if j.startswith("s") else After(0))
        for j in good[: n_good - SERIES]
    ]
    if bad is not None:
        specs.insert(min(pos, len(specs)), spec("bad", bad))
    specs += [spec(j, Every(60, anchor=START)) for j in good[n_good - SERIES :]]
    rs.add_many(specs)
    clock.advance(60)  # every job due (a series' first occurrence: START + 60 s)
    w = World(rs, raw, clock, good, set(good[n_good - SERIES :]))
    w.bad_series = isinstance(bad, (Every, Cron))
    for member, score in raw.zrange(w.key("due:default"), 0, -1, withscores=True):
        if member.endswith(b"|s|bad"):
            w.bad_member, w.bad_due = member.decode(), score
    return w


def claim_all(w: World, owner: str, cap: int, extra: dict[str, list[set[str]]]) -> list[RawClaim]:
    """One checked claim call; the claims (their tokens remembered)."""
    allowed = {j: [CLAIMED, CLAIMED | {"due+"}] for j in w.good}  # a series' next occurrence
    allowed.update(extra)
    reply, _ = w.call(
        allowed,
        "claim",
        lambda: w.raw("claim", owner, uuid.uuid4().hex, LEASE, "*", "", "default", str(cap)),
    )
    claims = claim_reply(reply if isinstance(reply, str) else reply.decode()).claims
    for c in claims:
        assert c[0] not in w.tokens, f"{c[0]} claimed twice"
        w.tokens[c[0]] = f"{owner}:{c[3]}"
    return claims


def finish(w: World, also: set[str] | None = None) -> None:
    """The caller keeps working: the live claims are completed, then whatever is due is
    claimed and completed. Then every good one-off ended exactly once (succeeded or
    failed), every series has its one pending occurrence, and no RUNNING entry or lease
    is left. ``also``: the bad job's id, when add.lua re-created it (it is good now)."""
    goods = set(w.good) | (also or set())
    for _ in range(3):
        if w.tokens:
            flat = [x for j, t in sorted(w.tokens.items()) for x in (j, t, "null")]
            allowed = {j: [DONE["complete"]] for j in goods}
            reply, _ = w.call(allowed, "complete_many", lambda: w.raw("complete_many", *flat))
            assert reply == ["ok"] * len(w.tokens)
            w.tokens.clear()
        # a re-added job: claimed (and the due member of the job it replaced, dropped)
        extra = {j: [CLAIMED, CLAIMED - {"due-"} | {"due-x2"}] for j in also or ()}
        if w.moved["bad"] and not also:  # the due member of a job moved aside: stale, dropped
            extra["bad"] = [{"due-"}]
        if not claim_all(w, "r9", 100, extra):
            break
    TALLY["items"] += 1
    TALLY["good jobs"] += len(goods)
    ended: Counter[str] = Counter()
    for d in w.diffs:
        ended.update(e["job"] for e in d.events if e["kind"] in ("succeeded", "failed"))
    members = w.r.zrange(w.key("due:default"), 0, -1)
    for j in goods:
        if j in w.series or (j == w.bad and w.bad_series):
            assert sum(m.endswith(f"|s|{j}".encode()) for m in members) == 1, j
        else:
            assert ended[j] == 1, (j, ended[j])
            assert w.r.hget(w.key(f"job:{j}"), "state") in (b"succeeded", b"failed"), j
    assert w.r.hlen(w.key("running")) == 0 and w.r.zcard(w.key("lease")) == 0


# ---- corruptions ---------------------------------------------------------------------

VALUES = st.one_of(
    st.sampled_from(
        [b"soon", b"", b"-5", b"-1", b"1e30", b"9" * 40, b"nan", b"inf", b"-inf", b"0x10"]
        + [b"1.5", b" 7", b"7 ", b"maybe", b"\xff\xfe", b"12345678901234567", b"\xed\xa0\x80"]
    ),
    st.binary(max_size=24),
    st.text(max_size=24).map(str.encode),
    st.integers(FIELD_MAX + 1, 8 * FIELD_MAX).map(lambda n: b"9" * n),
)
TYPES = st.sampled_from(["string", "list", "set", "zset", "stream"])


def plant_type(r: redis.Redis, key: bytes, kind: str) -> None:
    r.delete(key)
    {
        "string": lambda: r.set(key, "x"),
        "list": lambda: r.rpush(key, "x"),
        "set": lambda: r.sadd(key, "x"),
        "zset": lambda: r.zadd(key, {"x": 1}),
        "stream": lambda: r.xadd(key, {"x": "1"}),
    }[kind]()


def corrupt_job(w: World, data: st.DataObject, script: str, classes: list[str]) -> str:
    """Corrupt the job "bad" in a way ``script`` detects; the reason it must give."""
    jk = w.key("job:bad")
    raw = w.r.hgetall(jk)
    h = records.job_hash(raw)  # its fields as the scripts read them (the small ones in st)
    names = reads(script, h)
    side = SIDE.get(script) or ("skips" if script == "claim" and h[b"kind"] == b"every" else None)
    how = data.draw(st.sampled_from(classes + (["side"] if side else [])), label="class")
    if how == "type":
        kind = data.draw(TYPES, label="type")
        plant_type(w.r, jk, kind)
        return f"malformed job data: the job key is a {kind}, not a hash"
    if how == "side":
        kind = data.draw(TYPES.filter(lambda t: t != "list"), label="side type")
        plant_type(w.r, w.key(f"{side}:bad"), kind)
        return f"malformed job data: {side}:bad is a {kind}, not a list"
    if how == "missing":
        stored = [n for n in [*names, "st"] if n.encode() in h or n.encode() in raw]
        gone = [n for n in stored if job_problem("hash", planted(raw, n, None), names)]
        need(data, bool(gone))
        name = data.draw(st.sampled_from(gone), label="missing")
        write_job_field(w.r, jk, name, None)
        return job_problem("hash", planted(raw, name, None), names) or ""
    name = data.draw(st.sampled_from([*names, "st"]), label="field")  # st itself too
    value = data.draw(VALUES, label="value")
    p = planted(raw, name, value)
    why = job_problem("hash", p, reads(script, records.job_hash(p)))
    need(data, why is not None)
    write_job_field(w.r, jk, name, value)
    return why or ""


def need(data: Any, condition: bool) -> None:
    """hypothesis' assume(); a fixed draw (Forced) must satisfy it."""
    if isinstance(data, Forced):
        assert condition
    else:
        assume(condition)


GARBAGE = st.one_of(
    st.sampled_from(
        [b"", b"!!!", b"zzz", b"1|2|3", b"00ff|q|j", b"00ff|r|x|1|1|0|j", b"00ff|r|1|5@|1|0|j"]
        + [b"1|5@|1|0|7|j", b"1|5@x|1|0|7|j", b"1|5@" + b"9" * 17 + b"|1|0|7|j"]
    ),
    st.binary(max_size=40),
    st.text(max_size=40).map(str.encode),
    st.tuples(st.sampled_from([b"1", b"x", b"9" * 20, b"-1", b""]), st.integers(0, 5)).map(
        lambda t: b"|".join([t[0]] * t[1] + [b"bad"])
    ),
)


# ---- scenarios -----------------------------------------------------------------------


def run_claim(url: str, n: int, data: st.DataObject) -> World:
    """3 replicas claim in turn; the bad item is a corrupt job, a malformed due member or
    a definition only the replica cannot decode (claimed through RedisStore.claim_due)."""
    how = data.draw(st.sampled_from(["job", "job", "member", "definition"]), label="item")
    kind = data.draw(st.sampled_from([After(0), Every(60, anchor=START)]), label="bad kind")
    w = world(url, n, None if how == "member" else kind, data.draw(st.integers(0, n), label="pos"))
    cap = data.draw(st.integers(1, n + 2), label="capacity")
    extra: dict[str, list[set[str]]]
    if how == "member":
        member = data.draw(GARBAGE.filter(lambda m: parse_member(m) is None), label="member")
        w.bad_member, w.bad_due = member.decode("utf-8", "surrogateescape"), START * 1000
        w.r.zadd(w.key("due:default"), {member: w.bad_due})
        bad_item, reason = entry_id("m", member), "malformed due entry"
        extra = {bad_item: [ASIDE | {"due-"}]}
    elif how == "job":
        reason = corrupt_job(w, data, "claim", ["type", "field", "missing"])
        bad_item, extra = "bad", {"bad": [ASIDE_JOB | {"due-"}]}
    else:
        return run_definition(w, data, cap)
    for turn in range(3 * (n + 3)):
        claim_all(w, f"r{turn % 3}", cap, extra)
        if w.moved[bad_item] and len(w.tokens) == len(w.good):
            break
    assert sorted(w.tokens) == sorted(w.good)  # each good job claimed, once
    assert w.moved[bad_item] == 1
    (rec,) = [d.records[bad_item] for d in w.diffs if bad_item in d.records]
    assert rec["reason"] == reason and rec["lane"] == "default"
    assert rec["score"] == w.bad_due and rec["token"] == rec["running"] == ""
    if how == "job" or w.bad_member.isprintable():
        assert rec["member"] == w.bad_member
    assert not w.r.exists(w.key("quarantine"))  # the legacy list: no longer written
    finish(w)
    return w


def run_definition(w: World, data: st.DataObject, cap: int) -> World:
    """A definition Lua passes (UTF-8, small) that the replica cannot decode: claimed by
    claim.lua, then moved aside by quarantine.lua (RedisStore.claim_due makes both calls,
    checked here as one)."""
    text = data.draw(DEFINITIONS, label="definition")
    try:
        definitions.decode(text, "bad")
    except (ValueError, KeyError, TypeError):
        pass
    else:
        assume(False)
    w.r.hset(w.key("job:bad"), "def", text)
    aside = {"due-", "jobkey-", "data+", "ev:claimed"} | ASIDE
    allowed = {j: [CLAIMED, CLAIMED | {"due+"}] for j in w.good}
    allowed["bad"] = [aside, aside | {"due+"}]
    for turn in range(3 * (len(w.good) + 3)):
        batch, _ = w.call(
            allowed,
            "claim",
            lambda turn=turn: w.rs.claim_due({"default": cap}, 10.0, f"r{turn % 3}"),
            claimed_first=frozenset({"bad"}),
        )
        for c in batch.claims:
            assert c.job_id not in w.tokens and c.job_id != "bad"
            w.tokens[c.job_id] = c.token
        if w.moved["bad"] and len(w.tokens) == len(w.good):
            break
    assert sorted(w.tokens) == sorted(w.good) and w.moved["bad"] == 1
    rec = json.loads(w.r.hget(w.key("quarantined"), "bad"))
    assert rec["by"] == "claim" and rec["reason"].startswith("malformed job data in Redis (")
    assert rec["running"].endswith("|bad") and rec["token"] and rec["lane"] == "default"
    finish(w)
    return w


_JOB = {"t": "tests.noop", "s": ["after", 0]}
DEFINITIONS = st.one_of(
    st.text(min_size=1, max_size=40).filter(lambda s: s.strip() != ""),  # mostly not JSON
    st.one_of(st.lists(st.integers(), max_size=3), st.integers(), st.text(max_size=8)).map(
        json.dumps
    ),
    st.text(max_size=20).map(lambda a: json.dumps({**_JOB, "a": a})),  # arguments not JSON
    st.one_of(st.lists(st.integers(), max_size=3), st.integers()).map(
        lambda a: json.dumps({**_JOB, "a": json.dumps(a)})  # arguments not a JSON object
    ),
    st.text(min_size=1, max_size=10)
    .filter(lambda k: k not in ("after", "at", "every", "cron"))
    .map(lambda k: json.dumps({**_JOB, "s": [k, 0]})),  # an unknown schedule kind
)


def run_reap(url: str, n: int, data: st.DataObject) -> World:
    """Every job claimed, then the bad item corrupted (its job, its RUNNING entry, or a
    lease with no RUNNING entry), the leases expire, a claim reaps (capacity 0)."""
    how = data.draw(st.sampled_from(["job", "job", "entry", "orphan"]), label="item")
    kind = data.draw(st.sampled_from([After(0), Every(60, anchor=START)]), label="bad kind")
    w = world(url, n, kind, data.draw(st.integers(0, n), label="pos"))
    claim_all(w, "r0", n + 1, {"bad": [CLAIMED, CLAIMED | {"due+"}]})
    token = w.tokens.pop("bad")
    if how == "job":
        reason = corrupt_job(w, data, "reap", ["type", "field", "missing"])
        item, effect = "bad", ASIDE_JOB | {"running-", "lease-"}
    elif how == "entry":
        entry = data.draw(GARBAGE.filter(lambda e: parse_running(e) is None), label="entry")
        w.r.hset(w.key("running"), token, entry)
        item, effect, reason = (
            entry_id("t", token.encode()),
            ASIDE | {"running-", "lease-"},
            "malformed RUNNING entry",
        )
    else:
        token = data.draw(
            st.text(min_size=1, max_size=30).filter(lambda t: ":" not in t), label="token"
        )
        w.r.zadd(w.key("lease"), {token: START * 1000})
        item, effect, reason = (
            entry_id("t", token.encode()),
            ASIDE | {"lease-"},
            "lease without a RUNNING entry",
        )
    w.clock.advance(11)
    allowed = {j: [REAPED] for j in w.good}
    if how == "orphan":  # the bad job itself is sound: reaped like the others
        allowed["bad"] = [REAPED]
    allowed[item] = [effect]
    w.call(
        allowed,
        "reap",
        lambda: w.raw("claim", "r1", uuid.uuid4().hex, LEASE, "*", "", "default", "0"),
    )
    assert w.moved[item] == 1
    (rec,) = [d.records[item] for d in w.diffs if item in d.records]
    assert rec["reason"] == reason and rec["token"] == token and rec["by"] == "reap"
    if how != "orphan":
        assert rec["job"] == ("bad" if how == "job" else "")
    w.tokens.clear()
    finish(w, {"bad"} if how == "orphan" else None)
    return w


def run_commit(url: str, n: int, data: st.DataObject, script: str) -> World:
    """Every job claimed; the bad one's job or RUNNING entry corrupted; then its owner
    reports every outcome (one complete_many, or one call per job in a drawn order)."""
    how = data.draw(st.sampled_from(["job", "job", "entry"]), label="item")
    kind = data.draw(st.sampled_from([After(0), Every(60, anchor=START)]), label="bad kind")
    w = world(url, n, kind, data.draw(st.integers(0, n), label="pos"))
    claim_all(w, "r0", n + 1, {"bad": [CLAIMED, CLAIMED | {"due+"}]})
    token = w.tokens["bad"]
    if how == "job":
        reason = corrupt_job(w, data, script, ["type", "field", "missing"])
        item, effect = "bad", ASIDE_JOB | {"running-", "lease-"}
    else:
        entry = data.draw(GARBAGE.filter(lambda e: parse_running(e) is None), label="entry")
        w.r.hset(w.key("running"), token, entry)
        item, effect = entry_id("t", token.encode()), ASIDE | {"running-", "lease-"}
        reason = "malformed RUNNING entry"
    allowed = {j: [DONE[script]] for j in w.good}
    allowed[item] = [effect]
    order = sorted(w.tokens)
    data.draw(st.randoms(use_true_random=False), label="order").shuffle(order)
    args = {"complete": ["null"], "fail": ["boom", ""], "release": []}.get(script, [])
    if script == "complete_many":
        flat = [x for j in order for x in (j, w.tokens[j], "null")]
        reply, _ = w.call(allowed, script, lambda: w.raw(script, *flat))
        assert reply == ["quarantined" if j == "bad" else "ok" for j in order]
    else:
        for j in order:
            reply, _ = w.call(allowed, script, lambda j=j: w.raw(script, j, w.tokens[j], *args))
            assert reply == ("quarantined" if j == "bad" else "ok"), (j, reply)
    assert w.moved[item] == 1
    (rec,) = [d.records[item] for d in w.diffs if item in d.records]
    assert rec["reason"].startswith(reason + ("; the invocation" if reason else "")), rec
    assert "lease lost" not in rec["reason"] and rec["token"] == token and rec["job"] == "bad"
    w.tokens.clear()
    finish(w)
    return w


def run_single(url: str, n: int, data: st.DataObject, script: str) -> World:
    """The bad job corrupted, then ``script`` called on it: it is moved aside, nothing
    else changes; the same script on a good job still works."""
    kind = {"plan": Cron("*/10 * * * * *"), "backfill": Every(60, anchor=START)}.get(
        script, data.draw(st.sampled_from([After(0), Every(60, anchor=START)]), label="kind")
    )
    w = world(url, n, kind, data.draw(st.integers(0, n), label="pos"))
    if script == "resume":
        assert w.rs.pause("bad")
    reason = corrupt_job(w, data, script, ["type", "field", "missing"])
    args = {
        "plan": ["bad", "1", "000000000001", "1000", "after", "2000"],
        "backfill": ["bad", "1", str(int(START * 1000))],
        "add": ["bad", *w.rs._add_args(spec("bad", After(0)))[1:]],
    }.get(script, ["bad"])
    effect = ASIDE_JOB
    if script == "add":
        effect = ASIDE | {"data+", "hash", "due+", "ev:scheduled"}
    reply, _ = w.call({"bad": [effect]}, script, lambda: w.raw(script, *args))
    assert reply == ANSWER.get(script, reply)
    if script == "add":
        assert reply[0] == "created"
        w.bad_series = False  # re-created: a one-off now
    assert w.moved["bad"] == 1
    (rec,) = [d.records["bad"] for d in w.diffs if "bad" in d.records]
    assert rec["reason"] == reason and rec["job"] == "bad"
    finish(w, {"bad"} if script == "add" else None)
    still_works(w, script)
    return w


def still_works(w: World, script: str) -> None:
    """The same script on a good job (a series: live whatever ran) answers normally."""
    job = sorted(w.series)[0]
    if script == "resume":
        assert w.rs.pause(job)
    if script in ("cancel", "pause", "resume", "trigger"):
        assert w.raw(script, job) == 1
    elif script == "add":
        args = w.rs._add_args(spec(job, Every(60, anchor=START)))[1:]
        assert w.raw("add", job, *args)[0] == "unchanged"
    elif script == "backfill":
        gen = records.job_hash(w.r.hgetall(w.key(f"job:{job}")))[b"gen"].decode()
        assert w.raw("backfill", job, gen, str(int(START * 1000))) == 1  # before its first
    elif script == "plan":  # not a calendar series: the plan is dropped
        assert w.raw("plan", job, "1", "000000000001", "1000", "after", "2000") == 0


def run(url: str, n: int, data: Any, script: str) -> World:
    if script == "claim":
        return run_claim(url, n, data)
    if script == "reap":
        return run_reap(url, n, data)
    if script in COMMITS:
        return run_commit(url, n, data, script)
    return run_single(url, n, data, script)


# ---- the tests ------------------------------------------------------------------------

COMMON: dict[str, Any] = {
    "deadline": None,
    "database": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}


@pytest.mark.parametrize("script", SCRIPTS)
@settings(max_examples=FAST_EXAMPLES, derandomize=True, **COMMON)
@given(data=st.data())
def test_one_corrupt_item_takes_no_good_job_with_it(redis_url, script, data):
    run(redis_url, FAST_GOOD, data, script)


@pytest.mark.corruption_full
@pytest.mark.timeout(FULL_TIMEOUT)
@pytest.mark.parametrize("script", SCRIPTS)
@settings(max_examples=FULL_EXAMPLES, **COMMON)
@given(data=st.data())
def test_one_corrupt_item_takes_no_good_job_with_it_full(redis_url, script, data):
    run(redis_url, FULL_GOOD, data, script)


class Forced:
    """Stands in for hypothesis' ``data``: each draw answers the value given for its label."""

    def __init__(self, **values: Any) -> None:
        self.values = values

    def draw(self, strategy: Any, label: str) -> Any:
        return self.values[label]


def check_oversize(url: str, n: int, script: str, size: int, rng: random.Random) -> None:
    """A field of ``size`` bytes (over its limit): the definition where the script reads
    it (valid JSON, so only its size gives it away), else the lane. Moved aside whole,
    never copied into a reply, an event or a record."""
    name = "def" if "def" in READS[script] else "lane"
    value = ("x" * size).encode()
    if name == "def":
        value = json.dumps({**_JOB, "a": json.dumps({"p": "x" * (size - 60)})}).encode()
    data = Forced(
        item="job",
        kind=After(0),
        pos=rng.randint(0, n),
        capacity=rng.randint(1, n),
        order=random.Random(rng.random()),
        **{"bad kind": After(0), "class": "field", "field": name, "value": value},
    )
    w = run(url, n, data, script)
    rec = [d.records for d in w.diffs if d.records]
    assert len(rec) == 1 and len(json.dumps(rec)) < 8192, "a record holds the big field"
    assert f"field {name} is over" in json.dumps(rec)
    assert all(len(repr(reply)) < 65536 for reply in w.replies), "a reply holds the big field"
    for d in w.diffs:
        assert all(len(json.dumps(e)) < 4096 for e in d.events), "an event holds the big field"
    assert len(w.r.hget(w.key("quarantined:bad"), name)) >= size  # kept whole, aside


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_oversize_field_is_moved_aside_never_copied(redis_url, script):
    """1-3 MB (not the issue's 100 MB, to stay fast: the scripts compare sizes; what it
    costs is the copy Redis makes to hand the field to Lua)."""
    rng = random.Random(script)
    check_oversize(redis_url, FAST_GOOD, script, rng.randint(DEF_MAX + 1, 3 * DEF_MAX), rng)


@pytest.mark.corruption_full
@pytest.mark.timeout(FULL_TIMEOUT)
@pytest.mark.parametrize("script", SCRIPTS)
def test_an_oversize_field_is_moved_aside_never_copied_full(redis_url, script):
    rng = random.Random(script + " full")
    for _ in range(3):
        check_oversize(redis_url, FULL_GOOD, script, rng.randint(DEF_MAX + 1, 3 * DEF_MAX), rng)
