"""``duetime limit`` against a real Redis namespace: set, list, remove; bad input is one
line and exit 2, writing nothing; ``enqueue --priority --limit-key`` (docs/flow-control.md)."""

from __future__ import annotations

import json
import re

import pytest

from scheduler.flow import Limit

pytestmark = pytest.mark.redis


def test_set_list_and_remove(ns_cli, ns_store):
    got = ns_cli("limit", "set", "customer:*", "--rate", "100", "--per", "60s")
    assert got.exit_code == 0, got.output
    assert got.output == "customer:*: 100 per 60s\n"
    assert ns_cli("limit", "set", "tenant:42", "--concurrency", "2").exit_code == 0
    assert ns_store.limits() == {
        "customer:*": Limit(100, 60.0, None),
        "tenant:42": Limit(None, None, 2),
    }
    listed = ns_cli("limit", "ls", "--key", "customer:7")
    assert listed.exit_code == 0
    assert "customer:*" in listed.output and "tenant:42" in listed.output
    assert "customer:7: customer:*: 100 per 60s; running 0" in listed.output
    data = json.loads(ns_cli("limit", "ls", "--json").output)
    assert data["limits"]["tenant:42"]["concurrency"] == 2
    assert ns_cli("limit", "rm", "tenant:42").output == "tenant:42: removed\n"
    again = ns_cli("limit", "rm", "tenant:42")  # no effect: exit 1, as everywhere
    assert (again.exit_code, again.output) == (1, "nothing to remove: tenant:42 has no limit\n")
    assert list(ns_store.limits()) == ["customer:*"]


@pytest.mark.parametrize(
    "args",
    [
        ["limit", "set", "k", "--rate", "0", "--per", "1s"],
        ["limit", "set", "k", "--rate", "5"],
        ["limit", "set", "k"],
        ["limit", "set", "a*b", "--concurrency", "1"],
        ["limit", "set", "k", "--concurrency", "-3"],
        ["limit", "set", "k", "--rate", "1", "--per", "2d"],
        ["limit", "rm", "bad*scope"],
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(ns_cli, ns_store, args):
    got = ns_cli(*args)
    assert got.exit_code == 2, got.output
    assert len(got.output.strip().splitlines()) == 1 and "Traceback" not in got.output
    assert ns_store.limits() == {}


def test_enqueue_with_a_priority_and_a_key(ns_cli, ns_store):
    got = ns_cli("enqueue", "t.x", "--id", "j", "--priority", "3", "--limit-key", "tenant:1")
    assert got.exit_code == 0, got.output
    info = ns_store.get("j")
    assert info is not None and info.lane == "default"
    assert (info.priority, info.limit_key) == (3, "tenant:1")
    shown = ns_cli("show", "j")
    assert "priority     3\n" in shown.output and "limit key    tenant:1\n" in shown.output
    assert json.loads(ns_cli("show", "j", "--json").output)["limit_key"] == "tenant:1"
    listed = json.loads(ns_cli("ls", "--state", "scheduled", "--json").output)
    assert [j["job_id"] for j in listed["jobs"]] == ["j"]  # found in its flow queue
    bad = ns_cli("enqueue", "t.x", "--priority", "11")
    assert bad.exit_code == 2 and "11" in bad.output


def _held_namespace(ns_cli, ns_store) -> None:
    """customer:* at 1 start a day: of customer:1's 3 jobs one was claimed, 2 are held by
    the rate; tenant:1 at 1 running: of its 2 jobs 1 runs, 1 is held; free has no limit."""
    assert ns_cli("limit", "set", "customer:*", "--rate", "1", "--per", "1d").exit_code == 0
    assert ns_cli("limit", "set", "tenant:1", "--concurrency", "1").exit_code == 0
    assert ns_cli("limit", "set", "idle:*", "--concurrency", "3").exit_code == 0
    for i in range(3):
        ns_cli("enqueue", "t.x", "--id", f"c{i}", "--limit-key", "customer:1")
    ns_cli("enqueue", "t.x", "--id", "c9", "--limit-key", "customer:2", "--delay", "1h")
    for i in range(2):
        ns_cli("enqueue", "t.x", "--id", f"t{i}", "--limit-key", "tenant:1")
    ns_cli("enqueue", "t.x", "--id", "free", "--limit-key", "free", "--delay", "1h")
    claimed = ns_store.claim_due({"default": 10}, 60.0, "o1").claims
    assert sorted(c.job_id for c in claimed) == ["c0", "t0"]


def test_ls_shows_what_waits_on_each_limit(ns_cli, ns_store):
    _held_namespace(ns_cli, ns_store)
    got = ns_cli("limit", "ls")
    assert got.exit_code == 0, got.output
    lines = got.output.splitlines()
    assert lines[0].split() == [
        "SCOPE", "LIMIT", "KEYS", "RUNNING", "IN", "WINDOW", "WAITING", "HELD", "OLDEST", "WAIT"
    ]  # fmt: skip
    rows = {line.split()[0]: line for line in lines[1:4]}
    assert re.match(r"customer:\*\s+1 per 86400s\s+1\s+1\s+1\s+2\s+2\s+\d", rows["customer:*"])
    assert re.match(r"idle:\*\s+3 at once\s+0\s+0\s+0\s+0\s+0\s+-$", rows["idle:*"])
    assert re.match(r"tenant:1\s+1 at once\s+1\s+1\s+0\s+1\s+1\s+\d", rows["tenant:1"])
    assert "customer:*: its keys with the most due jobs waiting" in got.output
    assert re.search(r"customer:1\s+1\s+1\s+2\s+\S+ s\s+rate \(next start in 1 d 0 h\)", got.output)
    data = json.loads(ns_cli("limit", "ls", "--json").output)
    assert data["limits"]["tenant:1"] == {"rate": None, "period": None, "concurrency": 1}
    by_scope = {s["scope"]: s for s in data["scopes"]}
    assert [s["scope"] for s in data["scopes"]] == ["customer:*", "idle:*", "tenant:1"]
    c = by_scope["customer:*"]
    assert (c["keys"], c["running"], c["window_starts"], c["waiting"], c["held"]) == (1, 1, 1, 2, 2)
    assert c["limit_text"] == "1 per 86400s" and c["oldest_wait"] >= 0
    assert [k["key"] for k in c["top"]] == ["customer:1"] and c["top"][0]["full"] == "rate"
    assert by_scope["idle:*"]["oldest_wait"] is None
    keyed = json.loads(ns_cli("limit", "ls", "--json", "--key", "tenant:1").output)["keys"]
    assert keyed[0]["full"] == "concurrency" and keyed[0]["running"] == 1
    assert "full: concurrency" in ns_cli("limit", "ls", "--key", "tenant:1").output
    assert "customer:*: its keys" not in ns_cli("limit", "ls", "--top", "0").output


def test_show_says_what_holds_a_job(ns_cli, ns_store):
    _held_namespace(ns_cli, ns_store)
    shown = ns_cli("show", "c1").output
    assert re.search(
        r"held by      limit customer:\* \(rate 1 per 86400s: 1 started in the window; next "
        r"start allowed in 1 d 0 h\), due \S+ s ago\n",
        shown,
    ), shown
    shown = ns_cli("show", "t1").output
    assert "held by      limit tenant:1 (concurrency 1: 1 running), due" in shown
    for job in ("c0", "c9", "free"):  # running; not due yet; no limit
        assert "held by" not in ns_cli("show", job).output
    held = json.loads(ns_cli("show", "t1", "--json").output)["held"]
    assert (held["scope"], held["reason"], held["running"]) == ("tenant:1", "concurrency", 1)
    assert held["text"] == "limit tenant:1 (concurrency 1: 1 running)"
    assert json.loads(ns_cli("show", "free", "--json").output)["held"] is None
    ns_cli("limit", "rm", "tenant:1")
    assert "held by" not in ns_cli("show", "t1").output  # its wait is not the limit's now


def test_a_namespace_without_limits_and_an_unknown_job_are_one_line(ns_cli, ns_store):
    got = ns_cli("limit", "ls")
    assert got.exit_code == 0
    assert got.output.strip().splitlines() == [
        f"no limits in namespace {ns_store.namespace!r}: declare one with duetime limit set "
        "SCOPE --rate N --per PERIOD or --concurrency K"
    ]
    assert json.loads(ns_cli("limit", "ls", "--json").output) == {
        "limits": {},
        "scopes": [],
        "keys": [],
    }
    missing = ns_cli("show", "nope")
    assert missing.exit_code == 1 and len(missing.output.strip().splitlines()) == 1
    bad = ns_cli("limit", "ls", "--key", "a*")
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1


def test_the_metrics_leaders_gauges_cover_each_limit(ns_cli, ns_store, redis_url, redis_ns):
    from scheduler.stores.redis import open_store
    from scheduler.stores.redis.reading import queries

    _held_namespace(ns_cli, ns_store)
    limits = queries.gauges(ns_store)["limits"]
    assert sorted(limits) == ["customer:*", "idle:*", "tenant:1"]  # scopes, never keys
    c = limits["customer:*"]
    assert (c["running"], c["window_starts"], c["waiting"], c["held"], c["full_keys"]) == (
        1,
        1,
        2,
        2,
        1,
    )
    assert c["oldest_wait"] >= 0 and limits["idle:*"]["oldest_wait"] == 0
    sharded = open_store(redis_url, redis_ns + "-sharded", shards=2)
    try:
        assert queries.gauges(sharded)["limits"] == {}
    finally:
        sharded.close()


def test_ls_and_show_read_around_garbage(ns_cli, ns_store, redis_url, redis_ns):
    """A limit, a running count or a window that does not parse is left out, never a
    failed readout (tests/web/test_readouts_garbage.py's theme)."""
    import redis

    _held_namespace(ns_cli, ns_store)
    raw = redis.Redis.from_url(redis_url)
    p = f"duetime:{{{redis_ns}}}:"
    raw.hset(p + "limits", "bad:*", "not a limit")
    raw.hset(p + "flow:run", "customer:9", "abc")
    raw.delete(p + "flow:win:customer:1")
    raw.set(p + "flow:win:customer:1", "not a list")
    raw.close()
    got = ns_cli("limit", "ls")
    assert got.exit_code == 0 and "Traceback" not in got.output, got.output
    assert "bad:*" not in got.output and "customer:*" in got.output
    data = json.loads(ns_cli("limit", "ls", "--json").output)
    c = next(s for s in data["scopes"] if s["scope"] == "customer:*")
    assert (c["waiting"], c["window_starts"], c["held"]) == (2, 0, 0)  # its window: unreadable
    assert "held by" not in ns_cli("show", "t0").output and ns_cli("show", "c1").exit_code == 0


# ---- key rules: duetime limit rule set|rm|ls ------------------------------------------------


def test_rules_set_list_remove_and_what_enqueue_gets(ns_cli, ns_store):
    got = ns_cli("limit", "rule", "set", "--task", "t.x", "--new-task", "customer:{customer_id}")
    assert got.exit_code == 0, got.output
    assert got.output == "task:t.x: customer:{customer_id}\n"
    again = ns_cli("limit", "rule", "set", "--task", "t.x", "--new-task", "customer:{customer_id}")
    assert again.output == "task:t.x: customer:{customer_id} (unchanged)\n"
    assert ns_cli("limit", "rule", "set", "--lane", "reports", "lane:reports").exit_code == 0
    assert ns_store.key_rules() == {
        "lane:reports": "lane:reports",
        "task:t.x": "customer:{customer_id}",
    }
    listed = ns_cli("limit", "rule", "ls")
    assert listed.exit_code == 0
    assert listed.output.splitlines()[0].split() == ["RULE", "TEMPLATE"]
    assert "task:t.x" in listed.output and "customer:{customer_id}" in listed.output
    data = json.loads(ns_cli("limit", "rule", "ls", "--json").output)
    assert data == {"rules": ns_store.key_rules()}
    enq = ns_cli("enqueue", "t.x", "--id", "j", "--kwargs", '{"customer_id": 7}')
    assert enq.exit_code == 0, enq.output
    assert ns_store.get("j").limit_key == "customer:7"
    own = ns_cli("enqueue", "t.x", "--id", "own", "--limit-key", "mine")
    assert own.exit_code == 0 and ns_store.get("own").limit_key == "mine"
    bad = ns_cli("enqueue", "t.x", "--id", "bad")  # no customer_id: refused, nothing written
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1
    assert "'customer_id'" in bad.output and ns_store.get("bad") is None
    assert ns_cli("limit", "rule", "rm", "--task", "t.x").output == "task:t.x: removed\n"
    again = ns_cli("limit", "rule", "rm", "--task", "t.x")
    assert (again.exit_code, again.output) == (1, "nothing to remove: task:t.x has no rule\n")
    assert ns_cli("limit", "rule", "rm", "--lane", "reports").exit_code == 0
    assert (
        ns_cli("limit", "rule", "ls").output
        == f"no key rules in namespace {ns_store.namespace!r}\n"
    )
    assert json.loads(ns_cli("limit", "rule", "ls", "--json").output) == {"rules": {}}


@pytest.mark.parametrize(
    "args",
    [
        ["limit", "rule", "set", "k"],  # neither --task nor --lane
        ["limit", "rule", "set", "--task", "t", "--lane", "l", "k"],
        ["limit", "rule", "set", "--task", "t", "{a:>3}"],
        ["limit", "rule", "set", "--task", "t", "{a.b}"],
        ["limit", "rule", "set", "--task", "t", "x{"],
        ["limit", "rule", "set", "--task", "t", "all*"],
        ["limit", "rule", "set", "--task", "t", ""],
        ["limit", "rule", "rm"],
        ["limit", "rule", "rm", "--task", " padded "],
    ],
)
def test_rule_bad_input_is_one_line_and_writes_nothing(ns_cli, ns_store, args):
    got = ns_cli(*args)
    assert got.exit_code == 2, got.output
    assert len(got.output.strip().splitlines()) == 1 and "Traceback" not in got.output
    assert ns_store.key_rules() == {}


def test_a_sharded_namespace_refuses_rules(redis_url, redis_ns):
    from click.testing import CliRunner

    from scheduler.cli import main

    env = {"DUETIME_REDIS_URL": redis_url + "?shards=2", "DUETIME_NAMESPACE": redis_ns}
    got = CliRunner().invoke(
        main, ["limit", "rule", "set", "--task", "t", "--new-task", "k"], env=env
    )
    assert got.exit_code == 2 and "key rules need an unsharded namespace" in got.output
    assert len(got.output.strip().splitlines()) == 1


def test_a_rule_for_a_task_no_replica_served_is_refused(ns_cli):
    got = ns_cli("limit", "rule", "set", "--task", "bilin.send", "k")
    assert got.exit_code == 2
    assert "no replica of this namespace serves task 'bilin.send'" in got.output
    assert "--new-task" in got.output and "Traceback" not in got.output
    assert ns_cli("limit", "rule", "ls", "--json").output.count("bilin") == 0
