"""The two facades (docs/facades.md) and the engine over a real RedisStore (Redis TIME,
real clock)."""

from __future__ import annotations

import threading
import time

import pytest

from scheduler import (
    Client,
    JobScheduler,
    RecurringJobScheduler,
    Scheduler,
    TaskNotRegisteredError,
    task,
)
from scheduler.stores.redis import RedisStore, StoreUnavailableError
from tests.helpers import WAIT

pytestmark = pytest.mark.redis

ran: dict[str, threading.Event] = {}
counts: dict[str, int] = {}


@task("tests.shared.mark")
def mark() -> None:
    ran.setdefault("mark", threading.Event()).set()


@task("tests.shared.count")
def count(name: str = "count") -> None:
    counts[name] = counts.get(name, 0) + 1
    if counts[name] >= 3:
        ran.setdefault(name, threading.Event()).set()


@pytest.fixture
def store(redis_url, redis_ns):
    s = RedisStore(redis_url, redis_ns, resync=30)
    yield s
    s.close()


def test_job_scheduler_over_redis(store):
    ran.pop("mark", None)
    with JobScheduler(num_workers=2, store=store) as s:
        job_id = s.schedule(mark, 0.05)
        assert isinstance(job_id, int)
        assert ran.setdefault("mark", threading.Event()).wait(WAIT)
        assert s.cancel(job_id) is False  # it already ran
        doomed = s.schedule(mark, 60)
        assert s.cancel(doomed) is True


def test_a_lambda_gets_an_error_that_says_how_to_register(store):
    with JobScheduler(num_workers=1, store=store) as s:
        with pytest.raises(TaskNotRegisteredError, match=r"@scheduler\.task"):
            s.schedule(lambda: None, 1)
        assert store.jobs() == []


def test_recurring_over_redis(store):
    counts.clear()
    ran.pop("count", None)
    with RecurringJobScheduler(num_workers=2, store=store) as r:
        r.schedule("tick", count, 0.05)
        r.schedule("tick", count, 0.05)  # same definition: no-op
        assert ran.setdefault("count", threading.Event()).wait(WAIT)
        assert r.deschedule("tick") is True
        assert r.deschedule("tick") is False


def test_an_enqueue_from_another_connection_wakes_a_sleeping_replica(store, redis_url, redis_ns):
    """resync is 30 s: only the pub/sub wake-up can make this run within the bound."""
    ran.pop("mark", None)
    with Scheduler(2, store=store) as engine, Client(redis_url, namespace=redis_ns) as c:
        engine.after("tests.shared.count", 3600, kwargs={"name": "far"})  # parks ~1 h
        time.sleep(0.2)  # let it park (nothing to signal on)
        t0 = time.monotonic()
        c.enqueue("tests.shared.mark", delay=0.1)
        assert ran.setdefault("mark", threading.Event()).wait(5)
        assert time.monotonic() - t0 < 2.0  # far below the 30 s resync


def test_unreachable_redis_gives_a_clear_error():
    s = RedisStore("redis://127.0.0.1:1/0", "x")
    with pytest.raises(StoreUnavailableError, match="cannot reach Redis at redis://127.0.0"):
        Client(s).enqueue("tests.shared.mark", delay=1)


def test_password_is_never_shown():
    s = RedisStore("redis://user:s3cret@127.0.0.1:1/0", "x")
    assert "s3cret" not in s.url
    with pytest.raises(StoreUnavailableError) as err:
        s.cancel("a")
    assert "s3cret" not in str(err.value)


def test_facade_lanes_and_stats_over_redis(store):
    """The read-out over a shared store: queue depths are the namespace's (Redis ``TIME``
    decides what is due), lag is this engine's claims."""
    ran.pop("mark", None)
    with JobScheduler(num_workers=1, store=store, lanes={"slow": 1}) as s:
        s.schedule(mark, 60, lane="slow")
        st = s.stats()
        assert (st.lanes["slow"].queued, st.lanes["slow"].due) == (1, 0)
        assert st.lanes["default"].queued == 0 and st.lag.samples == 0
        began = time.time()
        s.schedule(mark, 0)
        assert ran.setdefault("mark", threading.Event()).wait(WAIT)
        st = s.stats()
        assert st.lanes["default"].lag.samples == 1
        assert 0.0 <= st.lag.max <= time.time() - began + 0.002  # claimed since scheduled
        assert st.lanes["slow"].workers == 1 and st.lanes["slow"].queued == 1


def test_queue_depths_add_up_over_shards(redis_url, redis_ns):
    from scheduler.model import After
    from scheduler.stores.base import QueueDepths
    from scheduler.stores.redis.sharding.sharded import open_store
    from tests.helpers import spec

    sharded = open_store(redis_url + "?shards=4", redis_ns)
    try:
        assert isinstance(sharded, QueueDepths)
        for i in range(12):
            sharded.add(spec(f"j{i}", After(0 if i % 3 else 3600), lane="a" if i < 6 else "b"))
        assert sharded.queue_depths() == {"a": (6, 4), "b": (6, 4)}
        assert len({id(sharded.shard(f"j{i}")) for i in range(12)}) > 1  # spread
    finally:
        sharded.close()
