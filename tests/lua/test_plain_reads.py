"""The plain reads of include/check.lua's read_job (a field list's `plain`: the claim's
CLAIM_FIELDS, the ack's SUCCESS_FIELDS) answer as the general way: for any job hash,
either they decline (nil) or they return exactly the fields the general way returns.
Planted hashes (layout 4: the small fields in ``st``): each field absent or one of its
typical, edge and malformed values, drawn by hypothesis, weighted toward the plain case
so that both ways are exercised."""

from __future__ import annotations

import pathlib
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.stores.redis.protocol import scripts as lua
from scheduler.stores.redis.protocol.records import JOB_ST
from tests.lua.corruption import lua_list

pytestmark = pytest.mark.redis

PREFIX = b"duetime:{plain-reads}:"


def probe(unit: str, fields: str) -> str:
    """A script reading job ARGV[3] both ways with field list `fields` of `unit`: the
    plain read's answer (or "declined") and the general way's, each as sorted lines."""
    return lua.assemble(
        f"#!lua\n--@include {unit}\n"
        "local function shown(f, why, t)\n"
        "  if not f then return 'nil|' .. tostring(why) .. '|' .. tostring(t) end\n"
        "  local out = {}\n"
        "  for k, v in pairs(f) do out[#out + 1] = k .. '=' .. v end\n"
        "  table.sort(out)\n"
        "  return table.concat(out, '\\n')\n"
        "end\n"
        f"local names = {fields}\n"
        "local general = {unpack(names)}\n"
        "local q = JOB.ask(names)\n"
        "local raw = redis.call('HMGET', jkey(ARGV[3]), unpack(q.list))\n"
        "local plain = raw[q.st] and names.plain(raw)\n"
        "return {plain and shown(plain) or 'declined', shown(read_job(ARGV[3], general))}\n",
        f"plain_reads_{unit}.lua",
    )


CLAIM = probe("inspect", "CLAIM_FIELDS")
SUCCESS = probe("commit", "SUCCESS_FIELDS")

DEF = b'{"a":"{}","s":["after",0],"t":"t.x"}'
INTS = [b"0", b"1", b"2", b"-1", b"01", b"x", b"", b"9" * 17]
# per field: the plain value first (drawn most), then others, typical and malformed
VALUES = {
    "gen": [b"7", b"0", b"-1", b"01", b"x", b"", b"9" * 17],
    "cancelled": [None, b"1", b"0", b""],
    "e": [b"00000000000a", b"", b"zz", b"0" * 17],
    "paused": [None, b"1", b"0", b""],
    "kind": [b"after", b"at", b"every", b"cron", b"x", b""],
    "def": [DEF, b"", b"\xff\xfe", b'{"t":"t.\xc3\xa9"}'],
    "running": [None, *INTS],
    "next": [b"1796471541496", b"-5", b"x", b"", b"9" * 17, b"01796471541496", b"9" * 16],
    "ready": [None, b"", b"1796471541497", b"x"],
    "lane": [None, b"default", b"mail", b""],
    "queued": [None, b"", b"5|", b"x"],
    "retries": [None, *INTS],
    "runs": [None, *INTS],
    "failures": [None, *INTS],
    "lists": [None, b"1", b""],
    "started": [None, b"3@1796471541496", b""],
    "keep": [None, b"60000", b"5", b"x"],
}
CLAIM_NAMES = ["gen", "cancelled", "e", "paused", "kind", "def", "running", "next", "ready"]
SUCCESS_NAMES = ["gen", "cancelled", "lane", "queued", "paused", "kind", "e", "retries",
                 "running", "runs", "failures", "lists", "started", "keep"]  # fmt: skip
# the plain claimed job's values where they differ from a pending one's
CLAIMED = {"e": b"", "running": b"1"}


def hashes(names: list[str], plain: dict[str, bytes | None]) -> st.SearchStrategy[dict]:
    def field(name: str) -> st.SearchStrategy[bytes | None]:
        first = plain.get(name, VALUES[name][0])
        others = [v for v in VALUES[name] if v != first] + [None]
        return st.one_of(st.just(first), st.just(first), st.sampled_from(others))

    return st.fixed_dictionaries({n: field(n) for n in names})


def both_ways(client, script: str, fields: dict[str, bytes | None]) -> list[bytes]:
    key = PREFIX + b"job:j"
    client.delete(key)
    planted = {k: v for k, v in fields.items() if v is not None and k not in JOB_ST}
    planted["st"] = b",".join(fields.get(name) or b"" for name in JOB_ST)
    client.hset(key, mapping=planted)
    return client.eval(script, 0, PREFIX, b"", b"j")


SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(fields=hashes(CLAIM_NAMES, {}))
def test_the_claims_plain_read_answers_as_the_general_way(redis_client, fields):
    plain, general = both_ways(redis_client, CLAIM, fields)
    assert plain in (b"declined", general)


@SETTINGS
@given(fields=hashes(SUCCESS_NAMES, CLAIMED))
def test_the_acks_plain_read_answers_as_the_general_way(redis_client, fields):
    plain, general = both_ways(redis_client, SUCCESS, fields)
    assert plain in (b"declined", general)


@pytest.mark.parametrize(
    ("script", "fields"),
    [
        (CLAIM, {n: VALUES[n][0] for n in CLAIM_NAMES}),
        (CLAIM, {**{n: VALUES[n][0] for n in CLAIM_NAMES}, "ready": b"1796471541497"}),
        (SUCCESS, {n: CLAIMED.get(n, VALUES[n][0]) for n in SUCCESS_NAMES}),
        (SUCCESS, {**{n: CLAIMED.get(n, VALUES[n][0]) for n in SUCCESS_NAMES}, "keep": b"60000",
                   "lane": b"mail"}),
    ],
    ids=["claim", "claim-ready", "ack", "ack-keep-lane"],
)  # fmt: skip
def test_a_plain_job_is_read_the_plain_way(redis_client, script, fields):
    plain, general = both_ways(redis_client, script, fields)
    assert plain == general != b"declined"


def test_a_successs_fields_are_a_commits_but_what_only_a_release_parses():
    text = (pathlib.Path(lua.lua_dir()) / "include" / "commit.lua").read_text()
    commit, success = lua_list(text, "COMMIT_FIELDS"), lua_list(text, "SUCCESS_FIELDS")
    only = re.findall(r"(\w+) = true", re.search(r"local QUEUED_ONLY = \{([^}]*)\}", text)[1])
    assert success == [n for n in commit if n not in only] == SUCCESS_NAMES
