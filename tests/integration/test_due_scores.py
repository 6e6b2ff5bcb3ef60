"""A due entry scored elsewhere than its job's pending time (garbage written by hand, found
by an operator's corruption drill): one scored in the past made a claim run the job
before its time ("never early" broken: a one-off due in an hour ran at once); one scored
at 1e300 never came due while ``duetime ls`` showed the job as scheduled, and ``doctor``
said "no job needs a repair". Now a claim puts an early entry back at the job's time,
and the reconciler scores a misplaced one at it again."""

from __future__ import annotations

import re

import pytest

from scheduler.model import After, Every
from scheduler.stores.redis import RedisStore
from tests.helpers import spec

pytestmark = pytest.mark.redis


def due_entry(store: RedisStore, redis_client, job: str) -> tuple[str, float]:
    entries = redis_client.zrange(store.keys.due("default"), 0, -1, withscores=True)
    (member, score), *_ = [(m.decode(), s) for m, s in entries if m.decode().endswith(job)]
    return member, score


@pytest.mark.parametrize("schedule", [After(3600), Every(3600)], ids=["one-off", "every"])
def test_an_entry_scored_early_is_put_back_at_its_time_never_run(
    redis_url, redis_ns, redis_client, clock, schedule
):
    store = RedisStore(redis_url, redis_ns, clock=clock)
    store._upkeep_at = float("inf")  # the claim's own check: no reconciler pass first
    store.add(spec("j", schedule))
    member, score = due_entry(store, redis_client, "j")
    redis_client.zadd(store.keys.due("default"), {member: -1e15})
    assert store.claim_due({"default": 10}, 30, "o").claims == []
    assert due_entry(store, redis_client, "j") == (member, score)  # back at its time
    assert [e.detail for e in store.events(5) if e.kind == "requeued"] == [
        "claim: its due entry was scored -1000000000000000, before its next run"
    ]
    clock.advance(3600)
    assert [c.job_id for c in store.claim_due({"default": 10}, 30, "o").claims] == ["j"]
    store.close()


@pytest.mark.parametrize("dry_run", [True, False])
def test_the_reconciler_scores_a_misplaced_entry_at_its_time(
    redis_url, redis_ns, redis_client, clock, dry_run
):
    store = RedisStore(redis_url, redis_ns, clock=clock)
    store.add(spec("far", After(60)))
    store.add(spec("fine", After(60)))
    member, score = due_entry(store, redis_client, "far")
    redis_client.zadd(store.keys.due("default"), {member: 1e300})
    found = store.reconcile(dry_run=dry_run)
    (finding,) = found.findings
    assert finding.job_id == "far" and re.fullmatch(
        rf"due entry scored 1(\.0+1)?e\+300, not at its next run {score:.0f}", finding.problem
    )
    assert found.findings[0].action == ("none (dry run)" if dry_run else "rescored")
    assert due_entry(store, redis_client, "far")[1] == (1e300 if dry_run else score)
    if not dry_run:
        clock.advance(60)
        claimed = store.claim_due({"default": 10}, 30, "o").claims
        assert sorted(c.job_id for c in claimed) == ["far", "fine"]
        assert store.reconcile().findings == ()
    store.close()
