"""A plain one-off is claimed and acknowledged the short way (include/plain.lua's
``PLAIN.look`` and ``PLAIN.acked``; include/issue.lua's ``PLAIN.issue``): claim.lua and
complete_many.lua leave exactly what they leave without it. Two namespaces get the same
planted data, and are called at the same now, once by the shipped script, once by a copy
whose short way always declines; the replies agree, and so does every key (a stream's
entries without their ids; whether a key expires). The data: a job hash near the plain
case (up to two fields drawn from all their values) or with each field typical, edge or
malformed (as in test_plain_reads.py); for a claim, its due member (scored at, after or
before the job's next; its seq the job's ``e`` or another; its job id ASCII or not) and a
task list ("*", one naming the job's task, one lacking it); for an ack, its RUNNING entry
(of the job or another, with a kept ready or not, its numbers long or short), its lease
(live or expired) and whether a handle waits for results."""

from __future__ import annotations

import pathlib
import shutil
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.stores.redis.protocol import scripts as lua
from scheduler.stores.redis.protocol.records import JOB_ST
from tests.lua.test_plain_reads import CLAIM_NAMES, CLAIMED, SUCCESS_NAMES, VALUES, hashes

pytestmark = pytest.mark.redis

SHORT, LONG = b"duetime:{short-ways-a}:", b"duetime:{short-ways-b}:"
LOOKS = {  # the short way's reader in include/plain.lua, per script
    "claim": "function PLAIN.look(b, member, score, q)\n",
    "complete_many": "function PLAIN.acked(job, data, q)\n",
}


def scripts(name: str) -> tuple[str, str]:
    """lua/<name>.lua as shipped, and the same with its short way declining everything."""
    src = pathlib.Path(lua.lua_dir())
    shipped = lua.assemble((src / f"{name}.lua").read_text(), f"{name}.lua", src)
    with tempfile.TemporaryDirectory() as tmp:
        copy = pathlib.Path(tmp) / "lua"
        shutil.copytree(src, copy)
        plain = copy / "include" / "plain.lua"
        text, look = plain.read_text(), LOOKS[name]
        assert text.count(look) == 1, f"{look!r} is gone: update this test"
        plain.write_text(text.replace(look, look + "  do return nil end\n"))
        declining = lua.assemble((copy / f"{name}.lua").read_text(), f"{name}.lua", copy)
    return shipped, declining


CLAIM = scripts("claim")
ACK = scripts("complete_many")
NEXT = 1796471541496


def keyspace(client: Any, prefix: bytes) -> dict[bytes, Any]:
    out: dict[bytes, Any] = {}
    for key in client.scan_iter(match=prefix + b"*", count=1000):
        name, kind = key[len(prefix) :], client.type(key)
        if kind == b"string":
            value: Any = client.get(key)
        elif kind == b"hash":
            value = client.hgetall(key)
        elif kind == b"zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == b"set":
            value = sorted(client.smembers(key))
        elif kind == b"stream":
            value = [fields for _, fields in client.xrange(key)]
        else:
            value = (kind, client.dump(key))
        out[name] = (value, client.pttl(key) > 0)
    return out


def plant(client: Any, prefix: bytes, fields: dict, job: bytes, fresh: bool = True) -> None:
    """Job `job`'s hash of `fields` (layout 4), in a namespace emptied first (`fresh`)."""
    for key in list(client.scan_iter(match=prefix + b"*", count=1000)) if fresh else ():
        client.delete(key)
    hash_ = {k: v for k, v in fields.items() if v is not None and k not in JOB_ST}
    hash_["st"] = b",".join(fields.get(name) or b"" for name in JOB_ST)
    client.hset(prefix + b"job:" + job, mapping=hash_)
    client.set(prefix + b"layout", b"4")


def both_ways(client: Any, pair: tuple[str, str], plant_one: Any, argv: list[bytes]) -> None:
    """Each namespace planted by ``plant_one(prefix)`` and called with ``argv`` (after the
    prefix); the replies (an error reply as its text), the messages published and the
    keyspaces agree."""
    replies: list[Any] = []
    for prefix, script in zip((SHORT, LONG), pair, strict=True):
        plant_one(prefix)
        heard = client.pubsub()
        heard.psubscribe(prefix + b"*")
        while (m := heard.get_message(timeout=5)) is None or m["type"] != "psubscribe":
            pass  # subscribed before the call
        try:
            replies.append(client.eval(script, 1, prefix + b"epoch", prefix, *argv))
        except Exception as exc:  # noqa: BLE001 - an error reply is an answer to compare
            replies.append(repr(exc).replace(prefix.decode(), "<prefix>"))
        client.publish(prefix + b"end", b"")  # the last message: all before it have come
        said = []
        while (m := heard.get_message(timeout=5)) and m["channel"] != prefix + b"end":
            said.append((m["type"], m["channel"][len(prefix) :], m["data"]))
        heard.close()
        replies.append(said)
    assert replies[0] == replies[2] and replies[1] == replies[3]
    assert keyspace(client, SHORT) == keyspace(client, LONG)


def near_plain(names: list[str], plain: dict[str, bytes]) -> st.SearchStrategy[dict]:
    """A plain one-off's fields ``names`` (``plain`` where they differ from VALUES' first),
    up to two of them drawn from all their values."""

    def varied(chosen: list[str]) -> st.SearchStrategy[dict]:
        return st.fixed_dictionaries(
            {
                n: st.sampled_from([*VALUES[n], None])
                if n in chosen
                else st.just(plain.get(n, VALUES[n][0]))
                for n in names
            }
        )

    return st.lists(st.sampled_from(names), max_size=2).flatmap(varied)


SETTINGS = settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
JOBS = [b"j", b"j", b"j|x", b"j\xc3\xa9"]


# ---- claims ---------------------------------------------------------------------------


def claimed_both_ways(client, fields, job, seq, offset, late, served) -> None:
    nxt = fields.get("next")
    score = (int(nxt) if nxt and nxt.lstrip(b"-").isdigit() else NEXT) + offset

    def plant_one(prefix: bytes) -> None:
        plant(client, prefix, fields, job)
        client.zadd(prefix + b"due:default", {seq + b"|s|" + job: score})

    now = str(score + late).encode()
    both_ways(
        client, CLAIM, plant_one, [now, b"o", b"rq1", b"30000", served, b"", b"default", b"10"]
    )


@SETTINGS
@given(
    fields=st.one_of(near_plain(CLAIM_NAMES, {}), hashes(CLAIM_NAMES, {})),
    job=st.sampled_from(JOBS),
    seq=st.sampled_from([b"00000000000a", b"00000000000a", b"00000000000b"]),
    offset=st.sampled_from([0, 0, 7, -7]),
    late=st.sampled_from([0, 50]),
    served=st.sampled_from([b"*", b"\nt.x\n", b"\nother\n"]),
)
def test_the_short_way_claims_as_the_general_way(
    redis_client, fields, job, seq, offset, late, served
):
    claimed_both_ways(redis_client, fields, job, seq, offset, late, served)


PENDING = {n: VALUES[n][0] for n in CLAIM_NAMES}
CLAIM_EDGES = {  # (fields changed, job, offset, late, served): plain but for one thing
    "plain": ({}, b"j", 0, 0, b"*"),
    "its-task-served": ({}, b"j", 0, 50, b"\nt.x\n"),
    "its-task-not-served": ({}, b"j", 0, 0, b"\nother\n"),
    "scored-after-its-next": ({}, b"j", 7, 0, b"*"),
    "scored-before-its-next": ({}, b"j", -7, 0, b"*"),
    "ready-later": ({"ready": b"1796471541497"}, b"j", 0, 50, b"*"),
    "next-with-a-leading-0": ({"next": b"01796471541496"}, b"j", 0, 0, b"*"),
    "next-of-16-digits": ({"next": b"9" * 16}, b"j", 0, 0, b"*"),
    "a-utf8-job-id": ({}, b"j\xc3\xa9", 0, 0, b"*"),
    "a-bar-in-its-id": ({}, b"j|x", 0, 0, b"*"),
}


@pytest.mark.parametrize("edge", CLAIM_EDGES.values(), ids=CLAIM_EDGES.keys())
def test_each_edge_of_the_short_claim_claims_as_the_general_way(redis_client, edge):
    changed, job, offset, late, served = edge
    claimed_both_ways(
        redis_client, {**PENDING, **changed}, job, b"00000000000a", offset, late, served
    )


# ---- acks -----------------------------------------------------------------------------

ENTRIES = {  # a RUNNING entry of job {job}: its fields but the id, then whose it is
    "plain": b"7|1796471541496|1|0|12|",
    "kept-ready": b"7|1796471541496@1796471541499|1|0|12|",
    "long-numbers": b"7|1796471541496|1|0|" + b"1" * 16 + b"|",
    "too-long": b"7|1796471541496|1|0|" + b"1" * 17 + b"|",
    "malformed": b"7|x|1|0|12|",
}


def acked_both_ways(client, fields, job, entry, whose, lease_in, waiting) -> None:
    """The ack of `job` (RUNNING entry `entry`), after a plain job's of the same lane (so
    that the lane is checked: a call's first item of a lane goes the general way)."""
    token, lane = b"o:12", fields.get("lane")
    lead = {**RUNNING, "lane": lane if lane else None}

    def plant_one(prefix: bytes) -> None:
        plant(client, prefix, fields, job)
        plant(client, prefix, lead, b"lead", fresh=False)
        client.hset(prefix + b"running", token, ENTRIES[entry] + (job if whose else b"k"))
        client.hset(prefix + b"running", b"o:11", ENTRIES["plain"] + b"lead")
        client.zadd(prefix + b"lease", {token: NEXT + lease_in, b"o:11": NEXT + 30_000})
        if waiting:
            client.zadd(prefix + b"waits", {job: NEXT + 60_000})

    argv = [str(NEXT).encode(), b"lead", b"o:11", b"null", job, token, b"null"]
    both_ways(client, ACK, plant_one, argv)


@SETTINGS
@given(
    fields=st.one_of(near_plain(SUCCESS_NAMES, CLAIMED), hashes(SUCCESS_NAMES, CLAIMED)),
    job=st.sampled_from(JOBS),
    entry=st.sampled_from([*ENTRIES, "plain", "plain"]),
    whose=st.sampled_from([True, True, False]),
    lease_in=st.sampled_from([30_000, 30_000, -5]),
    waiting=st.sampled_from([False, False, True]),
)
def test_the_short_way_acks_as_the_general_way(
    redis_client, fields, job, entry, whose, lease_in, waiting
):
    acked_both_ways(redis_client, fields, job, entry, whose, lease_in, waiting)


RUNNING = {n: CLAIMED.get(n, VALUES[n][0]) for n in SUCCESS_NAMES}
ACK_EDGES = {  # (fields changed, job, entry, whose, lease in, waiting): plain but for one
    "plain": ({}, b"j", "plain", True, 30_000, False),
    "in-a-lane": ({"lane": b"mail"}, b"j", "plain", True, 30_000, False),
    "its-result-kept": ({"keep": b"60000"}, b"j", "plain", True, 30_000, False),
    "a-handle-waits": ({}, b"j", "plain", True, 30_000, True),
    "its-lease-expired": ({}, b"j", "plain", True, -5, False),
    "another-jobs-entry": ({}, b"j", "plain", False, 30_000, False),
    "a-kept-ready": ({}, b"j", "kept-ready", True, 30_000, False),
    "long-numbers": ({}, b"j", "long-numbers", True, 30_000, False),
    "too-long-numbers": ({}, b"j", "too-long", True, 30_000, False),
    "a-malformed-entry": ({}, b"j", "malformed", True, 30_000, False),
    "a-utf8-job-id": ({}, b"j\xc3\xa9", "plain", True, 30_000, False),
    "a-bar-in-its-id": ({}, b"j|x", "plain", True, 30_000, False),
    "running-twice": ({"running": b"2"}, b"j", "plain", True, 30_000, False),
}


@pytest.mark.parametrize("edge", ACK_EDGES.values(), ids=ACK_EDGES.keys())
def test_each_edge_of_the_short_ack_acks_as_the_general_way(redis_client, edge):
    changed, job, entry, whose, lease_in, waiting = edge
    acked_both_ways(redis_client, {**RUNNING, **changed}, job, entry, whose, lease_in, waiting)


ACKED = lua.assemble(
    "#!lua\n--@include commit\n"
    "local x = PLAIN.acked(ARGV[3], ARGV[4], JOB.ask(SUCCESS_FIELDS))\n"
    "return x and 'short' or 'declined'\n",
    "acked_probe.lua",
)


@pytest.mark.parametrize(
    ("entry", "way"),
    [
        (b"7|1796471541496|1|0|12|j", b"short"),
        (b"12345678|1796471541496|1|0|87654321|j", b"short"),  # a busy namespace's counters
        (b"1234567890123456|1796471541496|1|0|1234567890123456|j", b"short"),
        (b"7|1796471541496|1|0|12345678901234567|j", b"declined"),  # parse_running refuses it
        (b"7|1796471541496@1796471541499|1|0|12|j", b"declined"),  # a kept ready
    ],
)
def test_the_short_ack_takes_what_parse_running_takes(redis_client, entry, way):
    """Each number of the entry at most 16 digits, as parse_running reads them: gen and the
    fence are namespace-wide counters (a bound on their sum turned a busy namespace's acks
    all the long way)."""
    plant(redis_client, SHORT, RUNNING, b"j")
    assert redis_client.eval(ACKED, 0, SHORT, b"", b"j", entry) == way
