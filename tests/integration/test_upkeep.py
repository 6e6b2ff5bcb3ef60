"""The reconciler and the quarantine (issue 12): what a crash or a past bug left behind is
repaired, legitimate states are left alone (not one write), what was moved aside can be
listed, restored and purged. Against a real redis-server; the states are planted the way
the defect of issue 12 left them (a claim script that failed halfway)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from scheduler.cli import main
from scheduler.client import Client
from scheduler.model import After, Cron, Delivery, Every, Misfire, Overlap
from scheduler.stores.redis import RedisStore
from tests.helpers import read_job_field, spec, write_job_field

pytestmark = pytest.mark.redis


@pytest.fixture
def store(redis_url, redis_ns, clock):
    s = RedisStore(redis_url, redis_ns, clock=clock)
    s._upkeep_at = float("inf")  # no background passes: each test calls what it checks
    yield s
    s.close()


def dump(r, store: RedisStore) -> dict[str, object]:
    """Every key of the namespace (but the reconciler's cursor): type and full value."""
    out: dict[str, object] = {}
    for key in sorted(r.scan_iter(match=store.keys.prefix + "*")):
        if key == store.keys.reconcile or key.startswith(store.keys.claimed("")):
            continue  # the cursor; the resend record of the test's own claims
        kind = r.type(key)
        if kind == "hash":
            out[key] = r.hgetall(key)
        elif kind == "zset":
            out[key] = r.zrange(key, 0, -1, withscores=True)
        elif kind == "list":
            out[key] = r.lrange(key, 0, -1)
        elif kind == "stream":
            out[key] = [f for _, f in r.xrange(key)]
        elif kind == "string":
            out[key] = r.get(key)
        else:
            out[key] = kind
    return out


def claim_ids(store: RedisStore, n: int = 50, lease: float | None = 30) -> list[str]:
    return [c.job_id for c in store.claim_due({"default": n}, lease, "o").claims]


def orphan(store: RedisStore, job: str) -> None:
    """The first defect: the due member removed, the job hash untouched."""
    store.redis.zremrangebyscore(store.keys.due("default"), "-inf", "+inf")


def test_an_orphan_one_off_is_queued_again_and_runs_once(store, clock):
    store.add(spec("lost", After(0)))
    store.add(spec("fine", After(60)))
    orphan(store, "lost")
    store.add(spec("fine", After(60)))  # equal definition: kept (no member comes back)
    assert claim_ids(store) == []
    done = store.reconcile()
    assert sorted((f.job_id, f.action) for f in done.findings) == [
        ("fine", "requeued"),
        ("lost", "requeued"),
    ]
    assert done.complete and done.scanned == 2
    (lost,) = store.claim_due({"default": 50}, 30, "o").claims
    assert lost.job_id == "lost"  # and "fine" at its own time: never early
    store.complete(lost, None)
    clock.advance(60)
    assert claim_ids(store) == ["fine"]
    assert store.reconcile().findings == ()  # nothing left to do
    kinds = [e.kind for e in store.events(100)]
    assert kinds.count("requeued") == 2


@pytest.mark.parametrize("delivery", [Delivery.AT_LEAST_ONCE, Delivery.AT_MOST_ONCE])
def test_a_half_claimed_one_off_is_requeued_or_abandoned_by_its_delivery(
    store, delivery, redis_client
):
    """The second defect: `running=1`, `attempts=1`, no RUNNING entry, no lease."""
    store.add(spec("half", After(0), delivery=delivery))
    orphan(store, "half")
    for name, value in (("running", "1"), ("attempts", "1"), ("e", "")):
        write_job_field(store.redis, store.keys.job("half"), name, value)
    done = store.reconcile()
    if delivery == Delivery.AT_MOST_ONCE:
        assert [f.action for f in done.findings] == ["abandoned"]
        assert store.get("half").state == "abandoned"
        assert claim_ids(store) == []
    else:
        assert [f.action for f in done.findings] == ["requeued"]
        assert claim_ids(store) == ["half"]


def test_a_running_count_no_entry_backs_is_set_right_and_releases_a_parked_run(store, clock):
    store.add(spec("tick", Every(10), overlap=Overlap.QUEUE))
    clock.advance(10)
    assert claim_ids(store) == ["tick"]
    clock.advance(10)
    assert claim_ids(store) == []  # busy: the occurrence is parked in `queued`
    assert read_job_field(store.redis, store.keys.job("tick"), "queued")
    store.redis.delete(store.keys.running)  # the running invocation's entry is gone
    store.redis.delete(store.keys.lease)
    done = store.reconcile()
    assert [(f.job_id, f.action) for f in done.findings] == [("tick", "recounted")]
    assert read_job_field(store.redis, store.keys.job("tick"), "running") == "0"
    assert claim_ids(store) == ["tick"]  # the parked occurrence was released


def test_legitimate_states_are_left_alone_without_a_single_write(store, clock):
    store.add(spec("paused", After(5)))
    store.pause("paused")
    store.add(spec("running", After(0)))
    store.add(spec("leaseless", After(0), lane="other"))
    store.add(spec("retrying", After(0), lane="third"))
    store.add(spec("done", After(0), lane="fourth"))
    store.add(spec("cancelled", After(50)))
    store.cancel("cancelled")
    store.add(spec("series", Every(30)))
    store.add(spec("calendar", Cron("*/5 * * * *")))
    store.add(spec("catchup", Every(1), misfire=Misfire.CATCH_UP, overlap=Overlap.QUEUE))
    clock.advance(1)
    assert sorted(claim_ids(store)) == ["catchup", "running"]
    assert [c.job_id for c in store.claim_due({"other": 5}, None, "o").claims] == ["leaseless"]
    (retry,) = store.claim_due({"third": 5}, 30, "o").claims
    store.fail(retry, "boom", 100)
    (done,) = store.claim_due({"fourth": 5}, 30, "o").claims
    store.complete(done, None)
    clock.advance(2)
    claim_ids(store)  # the catch-up series is parked behind its running invocation
    r = store.redis
    before = dump(r, store)
    assert store.reconcile().findings == ()
    assert store.reconcile(dry_run=True).findings == ()
    for _ in range(3):
        store._upkeep()  # background passes, too
    assert dump(r, store) == before


def test_a_dry_run_reports_and_writes_nothing(store):
    store.add(spec("lost", After(0)))
    orphan(store, "lost")
    before = dump(store.redis, store)
    done = store.reconcile(dry_run=True)
    assert [(f.job_id, f.action) for f in done.findings] == [("lost", "none (dry run)")]
    assert dump(store.redis, store) == before


def test_a_lease_entry_no_running_entry_backs_is_dropped(store):
    store.redis.zadd(store.keys.lease, {"ghost:7": 10**13})
    assert store.reconcile().leases_dropped == 1
    assert store.redis.zcard(store.keys.lease) == 0


def test_background_passes_share_one_cursor_and_are_bounded(redis_url, redis_ns, clock):
    """In a database of its own: SCAN walks the whole database, and the shared test
    server's other namespaces would make the walk long."""
    from scheduler.stores.redis.integrity import upkeep

    store = RedisStore(redis_url.rsplit("/", 1)[0] + "/7", redis_ns, clock=clock)
    store._upkeep_at = float("inf")
    for i in range(30):
        store.add(spec(f"j{i}", After(0)))
    orphan(store, "all")
    seen, cursors = 0, []
    for _ in range(200):
        done = upkeep.reconcile_pass(store, count=5)
        seen += done.scanned
        cursors.append(store.redis.get(store.keys.reconcile))
        assert done.scanned <= 30
        if done.complete:
            break
    assert done.complete and seen >= 30 and len(set(cursors)) > 1
    assert len(claim_ids(store)) == 30
    store.close()


def test_an_engine_repairs_at_start(redis_url, redis_ns, clock):
    """In a database of its own: the start's pass covers 100 keys of the database."""
    from scheduler import Scheduler

    s = RedisStore(redis_url.rsplit("/", 1)[0] + "/8", redis_ns, clock=clock)
    s.add(spec("lost", After(0)))
    orphan(s, "lost")
    eng = Scheduler(1, store=s, clock=clock)
    try:
        assert eng.wait_idle()
        eng.shutdown(wait=True)  # batched acks are recorded by then
        assert s.get("lost").state == "succeeded"
    finally:
        eng.shutdown()
        s.close()


# ---- the quarantine ------------------------------------------------------------------------


def plant(store: RedisStore, entry: str, job: str, *, member: str = "", score: int = -1):
    """An entry of the quarantine as the scripts write it (lua/README.md)."""
    record = {
        "id": entry,
        "job": job,
        "reason": "malformed job data: field next is not an integer",
        "at": 1_000_000,
        "by": "claim",
        "member": member,
        "lane": "default" if member else "",
        "score": score,
        "type": "hash",
        "running": "",
        "token": "",
    }
    store.redis.hset(store.keys.quarantined, entry, json.dumps(record))


def test_a_quarantined_job_is_listed_restored_after_a_fix_and_runs(store):
    store.add(spec("bad", After(0)))
    (member, score) = store.redis.zrange(store.keys.due("default"), 0, 0, withscores=True)[0]
    store.redis.zrem(store.keys.due("default"), member)
    store.redis.rename(store.keys.job("bad"), store.keys.quarantined_data("bad"))
    plant(store, "bad", "bad", member=member, score=int(score))
    client = Client(store)
    (q,) = client.quarantined()
    assert (q.entry_id, q.job_id, q.found_by, q.member) == ("bad", "bad", "claim", member)
    assert "next is not an integer" in q.reason and q.due == score / 1000
    assert client.restore("bad") == "restored"
    assert client.quarantined() == [] and claim_ids(store) == ["bad"]
    assert [e.kind for e in store.events(5)][-2] == "restored"
    assert client.restore("bad") == "missing"


def test_restoring_data_that_still_does_not_parse_says_so_and_keeps_the_entry(
    store, redis_url, redis_ns
):
    """``quarantine restore`` said "restored job" (exit 0) for data still bad, which the
    restore's own check (or the next claim) moved aside again at once."""
    store.add(spec("bad", After(0)))
    write_job_field(store.redis, store.keys.job("bad"), "next", "soon")
    store.redis.rename(store.keys.job("bad"), store.keys.quarantined_data("bad"))
    plant(store, "bad", "bad")
    client = Client(store)
    outcome = client.restore("bad")
    assert outcome.startswith("still-bad malformed job data: field next is not an integer")
    assert [q.entry_id for q in client.quarantined()] == ["bad"]
    store.redis.hset(store.keys.quarantined_data("bad"), mapping={"next": "1", "def": "{x"})
    outcome = client.restore("bad")  # a definition Python cannot read: found before
    assert outcome.startswith("still-bad definition does not parse (JSONDecodeError")
    assert [q.entry_id for q in client.quarantined()] == ["bad"]
    result = CliRunner().invoke(
        main, ["quarantine", "restore", "bad", "--redis", redis_url, "-n", redis_ns]
    )
    assert result.exit_code == 1 and "job 'bad' still does not parse" in result.output


def test_restore_refuses_when_the_job_exists_again_and_purge_drops_the_entry(store):
    store.add(spec("twice", After(0)))
    store.redis.copy(store.keys.job("twice"), store.keys.quarantined_data("twice"))
    plant(store, "twice", "twice")
    plant(store, "m:0123456789abcdef", "")
    store.redis.rpush(store.keys.quarantine, "!!!")  # a legacy entry
    client = Client(store)
    assert [q.entry_id for q in client.quarantined()] == [
        "m:0123456789abcdef",
        "twice",
        "legacy:0",
    ]
    assert client.restore("twice") == "exists"
    assert client.restore("m:0123456789abcdef") == "no-job"
    assert client.purge_quarantined("twice") == 1
    assert not store.redis.exists(store.keys.quarantined_data("twice"))
    assert client.purge_quarantined() == 2  # the rest, legacy list included
    assert client.quarantined() == []
    assert store.get("twice").state == "scheduled"  # the live job was never touched


def test_the_in_process_store_has_no_quarantine(clock):
    from scheduler.stores.memory import MemoryStore

    with pytest.raises(TypeError, match="no quarantine"):
        Client(MemoryStore(clock)).quarantined()


def test_a_malformed_orphan_is_moved_aside_not_left_forever(store):
    """An orphan whose data does not parse would never come due (no claim would move it
    aside): the reconciler moves it to the quarantine itself."""
    store.add(spec("garbled", After(0)))
    store.add(spec("fine", After(0)))
    orphan(store, "garbled")
    write_job_field(store.redis, store.keys.job("garbled"), "next", "soon")
    assert store.reconcile(dry_run=True).findings[0].action == "none (dry run)"
    found = {f.job_id: f for f in store.reconcile().findings}
    assert found["garbled"].action == "moved aside"
    assert "field next is not" in found["garbled"].problem
    assert found["fine"].action == "requeued"
    (q,) = store.quarantined()
    assert (q.entry_id, q.found_by) == ("garbled", "reconcile")
    assert store.redis.exists(store.keys.quarantined_data("garbled"))
    assert claim_ids(store) == ["fine"]


def test_a_malformed_running_entry_without_a_lease_is_moved_aside(store):
    """A RUNNING entry that does not parse and holds no lease: no claim's reaper would
    ever meet it (only expired leases are reaped), so it would count as running forever.
    The reconciler reports it (dry run: nothing written), then moves it aside, and its
    one-off job is queued again (the invocation was lost: at least once); a garbled entry
    that holds a lease is left to the reaper, and a sound entry without a lease (a
    leaseless replica's) is left alone."""
    import hashlib

    store.add(spec("held", After(0)))
    store.add(spec("garbled", After(0), lane="other"))
    (held,) = store.claim_due({"default": 5}, None, "o").claims
    (garbled,) = store.claim_due({"other": 5}, None, "o").claims
    r = store.redis
    r.hset(store.keys.running, garbled.token, "7|not|a|running|entry|garbled")
    r.hset(store.keys.running, "leased:9", "also garbage")
    r.zadd(store.keys.lease, {"leased:9": 10**13})
    entry = "t:" + hashlib.sha1(garbled.token.encode()).hexdigest()[:16]

    before = dump(r, store)
    dry = {f.job_id: f for f in store.reconcile(dry_run=True).findings}
    assert dump(r, store) == before
    assert sorted(dry) == ["garbled", entry]
    assert dry[entry].problem == (
        f"malformed RUNNING entry without a lease (token {garbled.token})"
    )
    assert {f.action for f in dry.values()} == {"none (dry run)"}

    done = {f.job_id: f.action for f in store.reconcile().findings}
    assert done == {entry: "moved aside", "garbled": "requeued"}
    (q,) = store.quarantined()
    assert (q.entry_id, q.found_by, q.job_id) == (entry, "reconcile", "")
    assert "malformed RUNNING entry without a lease" in q.reason
    record = json.loads(r.hget(store.keys.quarantined, entry))
    assert (record["running"], record["token"]) == ("7|not|a|running|entry|garbled", garbled.token)
    assert set(r.hkeys(store.keys.running)) == {held.token, "leased:9"}
    # the lost invocation's one-off job is then an orphan: queued again (at least once)
    assert read_job_field(r, store.keys.job("garbled"), "running") == "0"
    assert [c.job_id for c in store.claim_due({"other": 5}, 30, "o").claims] == ["garbled"]
    assert store.reconcile().findings == ()


def test_the_background_passes_leave_a_malformed_running_entry_to_the_doctor(store):
    """Parsing every RUNNING entry (~5 us each: 50 ms at 10,000 running) is too long for a
    replica's background pass: only a full scan of the caller's own (duetime doctor,
    ``Client.reconcile``) moves such an entry aside."""
    from scheduler.stores.redis.integrity import upkeep

    store.add(spec("stuck", After(0)))
    (claim,) = store.claim_due({"default": 5}, None, "o").claims
    store.redis.hset(store.keys.running, claim.token, "garbage")
    for _ in range(3):
        upkeep.reconcile_pass(store)
    assert store.redis.hget(store.keys.running, claim.token) == "garbage"
    assert store.quarantined() == []
    assert [f.action for f in store.reconcile().findings if f.job_id.startswith("t:")] == [
        "moved aside"
    ]
    assert not store.redis.hexists(store.keys.running, claim.token)
