"""A job's small fields in one field ``st`` (layout 4, lua/include/st.lua): what add writes;
a job of an earlier layout (its small fields as fields of their own) read the old way and
converted by its first write; ``st`` the only truth (a stray field of the old form is
read by no script and no readout); a malformed ``st`` moved aside with its reason."""

from __future__ import annotations

import pathlib
import re

import pytest

from scheduler.model import After, Commit, Every
from scheduler.stores.redis.protocol.records import JOB_ST, job_hash
from tests.helpers import spec, write_job_field
from tests.lua.test_batches import many

pytestmark = pytest.mark.redis

OLD_FORM = {name.encode() for name in JOB_ST}


def as_layout_3(r, key: str) -> None:
    """Rewrite a stored job as layout 3 kept it: st's values as fields of their own."""
    h = job_hash(r.hgetall(key))
    r.delete(key)
    r.hset(key, mapping=h)


def test_add_writes_a_plain_one_offs_hash_as_its_definition_and_st(rs, redis_client):
    rs.add(spec("a", After(5)))
    raw = redis_client.hgetall(rs.keys.job("a"))
    assert set(raw) == {b"def", b"st"}
    values = raw[b"st"].split(b",")
    assert len(values) == len(JOB_ST) == 16
    seq, due = redis_client.zrange(rs.keys.due("default"), 0, -1, withscores=True)[0]
    got = dict(zip(JOB_ST, values, strict=True))
    assert (got["gen"], got["kind"], got["next"]) == (b"1", b"after", str(int(due)).encode())
    assert seq == got["e"] + b"|s|a"
    assert [k for k, v in got.items() if v] == ["gen", "kind", "e", "next"]
    assert redis_client.get(rs.keys.layout) == b"4"


def test_a_job_of_layout_3_is_read_the_old_way_then_converted(rs, redis_client, clock):
    """An upgrade meets jobs its predecessor wrote: each reads as before (scripts and
    readouts) until its first write, which packs its fields (no offline migration)."""
    rs.add(spec("a", After(0)))
    rs.add(spec("s", Every(60)))
    fresh = {j: rs.get(j) for j in ("a", "s")}
    for j in ("a", "s"):
        as_layout_3(redis_client, rs.keys.job(j))
        assert b"st" not in redis_client.hgetall(rs.keys.job(j))
    redis_client.set(rs.keys.layout, "3")
    assert {j: rs.get(j) for j in ("a", "s")} == fresh
    (c,) = rs.claim_due({"default": 10}, 30, "o").claims
    raw = redis_client.hgetall(rs.keys.job("a"))
    assert b"st" in raw and not OLD_FORM & set(raw)  # converted by the claim's write
    assert job_hash(raw)[b"running"] == b"1"
    assert redis_client.get(rs.keys.layout) == b"4"
    assert rs.complete(c, 7) is Commit.OK
    done = rs.get("a")
    assert (done.state, done.runs, done.running) == ("succeeded", 1, ())
    clock.advance(60)
    (c,) = rs.claim_due({"default": 10}, 30, "o").claims
    assert c.job_id == "s" and not OLD_FORM & set(redis_client.hgetall(rs.keys.job("s")))
    assert rs.complete(c, None) is Commit.OK and rs.get("s").runs == 1


def test_the_plain_way_writes_st_as_the_general_way_does(rs, redis_client):
    """A plain one-off's claim and ack write st by hand (include/plain.lua): the same as
    JOB.set writes for a job the general way reads (running 0, not empty: not plain)."""
    for j in ("plain", "general"):
        rs.add(spec(j, After(0), result_ttl=60))
    write_job_field(redis_client, rs.keys.job("general"), "running", "0")

    def st(j: str) -> dict[str, bytes]:
        got = dict(zip(JOB_ST, redis_client.hget(rs.keys.job(j), "st").split(b","), strict=True))
        return {**got, "gen": b"<its own>", "next": b"<its due>"}

    claims = rs.claim_due({"default": 10}, 30, "o").claims
    assert st("plain") == st("general")
    assert {k: v for k, v in st("plain").items() if v} == {
        "gen": b"<its own>", "kind": b"after", "next": b"<its due>", "running": b"1",
        "attempts": b"1", "keep": b"60000",
    }  # fmt: skip
    assert many(rs, *[(c, "null") for c in claims]) == ["ok", "ok"]
    assert st("plain") == st("general")
    assert (st("plain")["running"], st("plain")["runs"]) == (b"0", b"1")
    assert rs.get("plain").state == rs.get("general").state == "succeeded"


def test_st_is_the_truth_a_stray_field_of_the_old_form_is_read_by_none(rs, redis_client):
    """A hand's `HSET job cancelled 1` on a job of layout 4 changes nothing: the scripts
    and the readouts read st alone (a hand edits st: docs/operating.md)."""
    rs.add(spec("a", After(0)))
    redis_client.hset(rs.keys.job("a"), mapping={"cancelled": "1", "running": "x"})
    assert rs.get("a").state == "scheduled"
    (c,) = rs.claim_due({"default": 10}, 30, "o").claims
    assert c.job_id == "a" and rs.complete(c, None) is Commit.OK


@pytest.mark.parametrize("st", [b"1,after", b"", b"1,after,1,5,,,,,,,,,,,,,", b"\xff" * 3])
def test_a_malformed_st_is_moved_aside_with_its_reason(rs, redis_client, st):
    rs.add(spec("a", After(0)))
    rs.add(spec("b", After(0)))
    redis_client.hset(rs.keys.job("a"), "st", st)
    shown = rs.get("a")  # the readouts say so too (they showed it scheduled, never run)
    assert shown.state == "malformed" and "field st is not 16 values" in shown.schedule
    assert [c.job_id for c in rs.claim_due({"default": 10}, 30, "o").claims] == ["b"]
    (q,) = rs.quarantined()  # by the claim, or the reconciler's pass before it
    assert (q.job_id, q.found_by in ("claim", "reconcile")) == ("a", True)
    assert q.reason == 'malformed job data: field st is not 16 values joined by ","'
    assert redis_client.hget(rs.keys.quarantined_data("a"), "st") == st  # kept as it was


def test_job_hash_reads_st_as_the_scripts_do():
    st = "3,at,,1700,,2,2,,,,,,1,1,,"
    got = job_hash({"def": "{}", "st": st, "running": "9", "last_error": "e"})
    assert got == {
        "def": "{}",
        "last_error": "e",
        "gen": "3",
        "kind": "at",
        "e": "",  # absent and empty alike: no pending occurrence
        "next": "1700",
        "running": "2",  # st's, not the stray field's
        "attempts": "2",
        "failures": "1",
        "lists": "1",
    }
    assert job_hash({b"st": st.encode()})[b"kind"] == b"at"
    assert job_hash({"st": "1,2"}) == {"st": "1,2"}  # does not parse: as it is
    assert job_hash({"gen": "1", "kind": "at"}) == {"gen": "1", "kind": "at"}  # layout 3


def test_the_layouts_python_reads_are_the_scripts():
    from scheduler.stores.redis.integrity.server_checks import LAYOUTS
    from scheduler.stores.redis.protocol import scripts

    core = (pathlib.Path(scripts.lua_dir()) / "include" / "core.lua").read_text()
    names, values = re.search(r"^local (LAYOUT[\w, ]+) = ([^\n]+)$", core, re.M).groups()
    assert tuple(re.findall(r"'(\d+)'", values)) == LAYOUTS
    assert f"reads layouts 1 to {LAYOUTS[-1]}" in core


def test_a_namespace_a_newer_duetime_wrote_is_refused_by_readers_and_replicas(
    rs, redis_client, redis_url
):
    """Its jobs would be misread (an older duetime's `ls` showed layout 4 jobs as never
    run) and a replica would start, claim nothing and warn forever: both refuse, one line."""
    from click.testing import CliRunner

    from scheduler.cli import main
    from scheduler.errors import StoreConfigError

    rs.add(spec("a", After(0)))
    redis_client.set(rs.keys.layout, "5")
    with pytest.raises(StoreConfigError, match="layout 5 in this namespace, but this duetime"):
        rs.check_server()  # what `duetime run` checks first (exit 1 with the line)
    for args in (["ls"], ["show", "a"], ["stats"]):
        got = CliRunner().invoke(main, [*args, "--redis", redis_url, "-n", rs.namespace])
        assert got.exit_code != 0 and got.output.count("\n") == 1, got.output
        assert "reads layouts 1 to 4: run one version of duetime per namespace" in got.output


def test_sts_order_is_written_once_for_each_side_and_they_agree():
    """JOB.ST, JOB.AT (a library's top level may call no function: AT is written out) and
    records.JOB_ST name the same places."""
    from scheduler.stores.redis.protocol import scripts

    text = (pathlib.Path(scripts.lua_dir()) / "include" / "st.lua").read_text()
    names = re.findall(r"'(\w+)'", re.search(r"ST = \{([^}]*)\}", text)[1])
    places = dict(re.findall(r"(\w+) = (\d+)", re.search(r"AT = \{([^}]*)\}", text)[1]))
    assert tuple(names) == JOB_ST
    assert {k: int(v) for k, v in places.items()} == {n: i + 1 for i, n in enumerate(JOB_ST)}
    assert re.search(r"PATTERN = ([^}]*)\}", text)[1].count("([^,]*)") == len(JOB_ST)
