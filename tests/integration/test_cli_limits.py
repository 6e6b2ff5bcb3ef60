"""``duetime limit`` against a real Redis namespace: set, list, remove; bad input is one
line and exit 2, writing nothing; ``enqueue --priority --limit-key`` (docs/flow-control.md)."""

from __future__ import annotations

import json

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
    assert ns_cli("limit", "rm", "tenant:42").output == "tenant:42: had no limit\n"
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


# ---- key rules: duetime limit rule set|rm|ls ------------------------------------------------


def test_rules_set_list_remove_and_what_enqueue_gets(ns_cli, ns_store):
    got = ns_cli("limit", "rule", "set", "--task", "t.x", "customer:{customer_id}")
    assert got.exit_code == 0, got.output
    assert got.output == "task:t.x: customer:{customer_id}\n"
    again = ns_cli("limit", "rule", "set", "--task", "t.x", "customer:{customer_id}")
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
    assert ns_cli("limit", "rule", "rm", "--task", "t.x").output == "task:t.x: had no rule\n"
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
    got = CliRunner().invoke(main, ["limit", "rule", "set", "--task", "t", "k"], env=env)
    assert got.exit_code == 2 and "key rules need an unsharded namespace" in got.output
    assert len(got.output.strip().splitlines()) == 1
