"""``duetime doctor`` and ``duetime quarantine`` against a real Redis namespace: text,
``--json`` and the documented exit codes (0 done; 1 found and not repaired / refused;
2 bad usage)."""

from __future__ import annotations

import json

import pytest

from scheduler.model import After
from tests.helpers import spec
from tests.integration.test_upkeep import orphan, plant

pytestmark = pytest.mark.redis


@pytest.fixture
def store(ns_store):
    return ns_store  # tests/integration/conftest.py


@pytest.fixture
def cli(ns_cli):
    return ns_cli  # tests/integration/conftest.py


def test_doctor_reports_in_a_dry_run_then_repairs(cli, store):
    store.add(spec("lost", After(3600)))
    assert cli("doctor").exit_code == 0  # healthy
    orphan(store, "lost")
    dry = cli("doctor", "--dry-run", "--json")
    assert dry.exit_code == 1, dry.output
    data = json.loads(dry.output)
    assert data["dry_run"] and data["scanned"] == 1
    assert data["findings"] == [
        {
            "job_id": "lost",
            "problem": "orphan: no due entry, nothing running",
            "action": "none (dry run)",
        }
    ]
    fixed = cli("doctor")
    assert fixed.exit_code == 0, fixed.output
    assert "lost" in fixed.output and "requeued" in fixed.output
    assert store.redis.zcard(store.keys.due("default")) == 1
    again = cli("doctor")
    assert again.exit_code == 0 and "no job needs a repair" in again.output


def test_quarantine_ls_show_restore_purge(cli, store):
    assert cli("quarantine", "ls").output.strip().endswith("is empty")
    store.add(spec("bad", After(0)))
    member = store.redis.zrange(store.keys.due("default"), 0, 0)[0]
    store.redis.zrem(store.keys.due("default"), member)
    store.redis.rename(store.keys.job("bad"), store.keys.quarantined_data("bad"))
    plant(store, "bad", "bad", member=member, score=1)
    plant(store, "m:00ff", "")
    listed = cli("quarantine", "ls")
    assert listed.exit_code == 0 and "bad" in listed.output and "claim" in listed.output
    entries = json.loads(cli("quarantine", "ls", "--json").output)
    assert [e["entry_id"] for e in entries] == ["bad", "m:00ff"]
    shown = cli("quarantine", "show", "bad")
    assert shown.exit_code == 0 and "next is not an integer" in shown.output
    assert "a hash" in shown.output and "def" in shown.output
    as_json = json.loads(cli("quarantine", "show", "bad", "--json").output)
    assert as_json["data_type"] == "hash" and "def" in as_json["data"]
    assert cli("quarantine", "show", "nope").exit_code == 1
    assert cli("quarantine", "restore", "m:00ff").exit_code == 1
    restored = cli("quarantine", "restore", "bad")
    assert restored.exit_code == 0 and store.get("bad") is not None
    assert cli("quarantine", "restore", "bad").exit_code == 1  # gone from the quarantine
    assert cli("quarantine", "purge").exit_code == 2  # an ID or --all
    assert cli("quarantine", "purge", "--all", input="n\n").exit_code == 1  # not confirmed
    purged = cli("quarantine", "purge", "--all", "--yes")
    assert purged.exit_code == 0 and "purged 1 entry" in purged.output
    assert cli("quarantine", "purge", "m:00ff").exit_code == 1


def test_doctor_moves_aside_a_malformed_running_entry_that_holds_no_lease(cli, store):
    store.add(spec("stuck", After(0)))
    (claim,) = store.claim_due({"default": 5}, None, "o").claims  # a leaseless replica's
    store.redis.hset(store.keys.running, claim.token, "garbage")
    dry = cli("doctor", "--dry-run")
    assert dry.exit_code == 1, dry.output
    assert "malformed RUNNING entry without a lease" in dry.output
    fixed = cli("doctor", "--json")
    assert fixed.exit_code == 0, fixed.output
    actions = {f["job_id"]: f["action"] for f in json.loads(fixed.output)["findings"]}
    entry = next(k for k in actions if k.startswith("t:"))
    assert actions == {entry: "moved aside", "stuck": "requeued"}
    assert cli("quarantine", "show", entry).exit_code == 0
    assert not store.redis.hexists(store.keys.running, claim.token)
    assert cli("doctor").exit_code == 0
