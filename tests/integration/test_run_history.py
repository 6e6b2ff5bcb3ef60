"""A recurring job keeps its last runs in Redis (lua/include/history.lua), so its page
and ``duetime show`` have a history after its events left the capped stream: each end
(succeeded, retried, failed, lease lost) with its claim time and duration, newest first,
the last 20; one-off jobs keep none; deleting the job deletes them."""

from __future__ import annotations

import pytest

from scheduler import Client
from scheduler.model import Commit
from scheduler.stores.redis import RedisStore
from scheduler.stores.redis.reading import queries
from scheduler.testing import FakeClock
from tests.helpers import every, spec

pytestmark = pytest.mark.redis


@pytest.fixture
def store(redis_url: str, redis_ns: str):
    s = RedisStore(redis_url, redis_ns, clock=FakeClock(1000.0))
    yield s
    s.close()


def claim_one(store: RedisStore, owner: str = "o1", lease: float = 10.0):
    claims = store.claim_due({"default": 10}, lease, owner).claims
    assert len(claims) == 1, claims
    return claims[0]


def test_a_recurring_job_keeps_its_runs_with_durations_newest_first(store):
    clock = store.clock
    store.add(every("tick", 10.0))
    outcomes = []
    for n in range(25):
        clock.advance(10.0)
        c = claim_one(store)
        clock.advance(0.25)  # the run takes 250 ms
        if n % 5 == 4:
            assert store.fail(c, "boom", None) is Commit.OK
            outcomes.append("failed")
        else:
            assert store.complete_many([(c, None)]) == [Commit.OK]
            outcomes.append("succeeded")
    runs = queries.stored_runs(store, "tick")
    assert len(runs) == 20  # the last 20
    assert [r["outcome"] for r in runs] == outcomes[::-1][:20]
    assert all(r["duration"] == pytest.approx(0.25, abs=0.002) for r in runs), runs
    scheds = [r["scheduled"] for r in runs]
    assert scheds == sorted(scheds, reverse=True) and scheds[0] - scheds[1] == pytest.approx(10)
    assert queries.recent_runs(store, "tick", 3) == runs[:3]  # show reads the same


def test_a_lease_lost_run_is_recorded_and_a_one_off_keeps_none(store):
    clock = store.clock
    store.add(every("tick", 10.0))
    store.add(spec("once"))
    clock.advance(10.0)
    claims = store.claim_due({"default": 10}, 1.0, "o1").claims
    assert {c.job_id for c in claims} == {"tick", "once"}
    once = next(c for c in claims if c.job_id == "once")
    assert store.complete_many([(once, None)]) == [Commit.OK]
    clock.advance(5.0)  # tick's lease (1 s) expires; the next claim reaps it
    store.claim_due({"default": 10}, 1.0, "o2")
    runs = queries.stored_runs(store, "tick")
    assert [r["outcome"] for r in runs] == ["lease_lost"] and runs[0]["attempt"] == 1
    assert queries.stored_runs(store, "once") == []


def test_deleting_or_replacing_the_job_drops_its_runs(store, redis_url, redis_ns):
    clock = store.clock
    store.add(every("tick", 10.0))
    clock.advance(10.0)
    assert store.complete_many([(claim_one(store), None)]) == [Commit.OK]
    assert len(queries.stored_runs(store, "tick")) == 1
    store.add(every("tick", 20.0))  # a changed definition: a new job
    assert queries.stored_runs(store, "tick") == []
    clock.advance(20.0)
    assert store.complete_many([(claim_one(store), None)]) == [Commit.OK]
    assert len(queries.stored_runs(store, "tick")) == 1
    client = Client(redis_url, namespace=redis_ns)
    try:
        assert client.delete("tick")
    finally:
        client.close()
    assert not store.redis.exists(store.keys.runs("tick"))


def test_a_runs_key_of_another_type_never_stops_an_outcome(store):
    clock = store.clock
    store.add(every("tick", 10.0))
    store.redis.set(store.keys.runs("tick"), "garbage")
    clock.advance(10.0)
    assert store.complete_many([(claim_one(store), None)]) == [Commit.OK]
    assert store.get("tick").runs == 1
    assert queries.stored_runs(store, "tick") == []
