"""Failover: what a SIGKILLed primary costs, measured and reported (issue 5 F9), and the
detection of a primary that lacks acknowledged claims.

Redis replication is asynchronous, so these tests do not assert "nothing lost": they
print what was lost and assert only what must hold whatever Redis lost: nothing stuck,
every enqueue acknowledged after the failover runs exactly once, every replica records the
failover, losses and re-runs stay within the moments before the kill, and a loss of
claims is detected.
"""

from __future__ import annotations

import logging
import queue

import pytest
import redis

from scheduler import Client
from scheduler.embedded import EmbeddedRedis
from scheduler.model import After
from scheduler.stores.redis import RedisStore
from tests.faults.fleet import wait_until
from tests.helpers import spec
from tests.integration.failover import run_failover
from tests.sentinel_fixtures import sentinel_cluster  # noqa: F401

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_failover_under_load_is_survived_and_its_losses_reported(
    sentinel_cluster, redis_url, redis_ns, tmp_path
):
    subscriber = RedisStore(sentinel_cluster.url, redis_ns)
    subscriber.claim_due({}, 30, "probe")  # learns Redis time: wake-ups become "due in"
    pokes: queue.Queue[float | None] = queue.Queue()
    unsubscribe = subscriber.subscribe(pokes.put)

    report = run_failover(sentinel_cluster, redis_url, tmp_path, count=2, workers=4)
    print(f"\nF9 failover report: {report.line()}\n  " + "\n  ".join(report.details))

    assert report.acked > 100 and report.acked_after > 0, report.line()
    assert report.stuck == 0, report.line()  # every surviving job finished
    assert report.after_not_once == 0, report.line()  # after the failover: once each
    assert report.failover_events == 2, report.details  # each replica recorded it
    lost = report.lost_never_ran + report.lost_but_ran
    assert lost <= report.acked_per_s, report.line()  # at most the last second's
    assert report.reruns <= report.window_starts, report.line()
    if report.reruns_same_attempt:  # Redis forgot a claim: said so
        assert report.data_loss_events > 0, report.line()

    # the wake-up subscriber follows the new primary: a job due in 60 s is announced
    while not pokes.empty():
        pokes.get_nowait()
    with Client(sentinel_cluster.url, namespace=redis_ns) as client:
        client.enqueue("tests.failover.later", delay=60)

    def announced() -> bool:
        while True:
            try:
                due_in = pokes.get(timeout=10)
            except queue.Empty:
                return False
            if due_in is not None and 30 < due_in <= 60:
                return True

    assert announced(), "no wake-up from the new primary"
    unsubscribe()
    subscriber.close()


def test_a_primary_that_lacks_acknowledged_claims_and_enqueues_is_detected(redis_ns, caplog, clock):
    """The promoted server stopped replicating before the last claims and an enqueue (as
    a lagging replica would): the next claim finds the fence counter below a fence already
    handed out, the next enqueue the seq counter below one already acknowledged; each
    records a data_loss event and raises its counter."""
    quick = ["--repl-diskless-sync-delay", "0"]  # a full sync at once, not after 5 s
    with EmbeddedRedis(extra_args=quick) as old, EmbeddedRedis(extra_args=quick) as new:
        new_r = redis.Redis(port=new.port)
        new_r.replicaof("127.0.0.1", old.port)
        client = redis.Redis(port=old.port, decode_responses=True)
        store = RedisStore(client, redis_ns, clock=clock)
        store.check_server()
        for i in range(5):
            store.add(spec(f"j{i}", After(0)))
        assert wait_until(lambda: new_r.exists(store.keys.job("j4")) == 1, 10)
        new_r.replicaof("NO", "ONE")  # the replica falls behind...
        first = store.claim_due({"default": 3}, 30, "o").claims  # ...these claims never reach it
        assert [c.fence for c in first] == [1, 2, 3]
        store.add(spec("late", After(3600)))  # ...nor this enqueue
        client.connection_pool.connection_kwargs["port"] = new.port  # "failover" to it
        client.connection_pool.disconnect()
        client.connection_pool.reset()  # new connections go to the new port
        with caplog.at_level(logging.ERROR, "duetime.redis"):
            again = store.claim_due({"default": 5}, 30, "o").claims
        assert sorted(c.job_id for c in again) == [f"j{i}" for i in range(5)]  # re-claimed
        assert store.data_loss_alarms == 1 and store.replication.lost_claims == 3
        (event,) = [e for e in store.events() if e.kind == "data_loss"]  # the claims
        assert "at least 3 acknowledged claim(s) lost" in event.detail
        assert "3 fence(s) reissued before the repair" in event.detail  # said, not hidden
        assert "lacks writes it acknowledged" in caplog.text
        store.add(spec("k", After(0)))  # the producer's turn
        assert store.data_loss_alarms == 2 and store.replication.lost_writes == 1
        assert (
            "at least 1 acknowledged enqueue(s) or reschedule(s) lost"
            in [e for e in store.events() if e.kind == "data_loss"][-1].detail
        )
        assert store.get("late") is None  # gone, but said so
        (later,) = store.claim_due({"default": 5}, 30, "o").claims
        assert later.fence > max(c.fence for c in first + again)  # monotone from here
        store.add(spec("k2", After(0)))
        assert store.data_loss_alarms == 2  # one alarm per loss
        store.close()
        new_r.close()
