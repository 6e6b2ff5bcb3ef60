"""The engine over a real RedisStore during a burst: claims come in batches beyond the free
workers (look-ahead), successes are acknowledged in batches, and every invocation is
claimed and committed exactly once."""

from __future__ import annotations

import time

import pytest

from scheduler import Scheduler
from scheduler.model import After
from scheduler.stores.redis import RedisStore
from tests.helpers import WAIT, spec

pytestmark = pytest.mark.redis

N = 400


def test_a_burst_is_claimed_in_batches_and_every_success_is_committed_once(redis_url, redis_ns):
    store = RedisStore(redis_url, redis_ns, resync=30)
    sizes: list[int] = []
    claimed = store.claimed  # every claim reply is read here (with acks riding too)

    def spy(text, request):  # type: ignore[no-untyped-def]
        batch = claimed(text, request)
        sizes.append(len(batch.claims))
        return batch

    store.claimed = spy  # type: ignore[method-assign]
    store.add_many([spec(f"b{i}", After(0)) for i in range(N)])
    r = store.redis
    with Scheduler(2, store=store, lookahead=1.0) as eng:
        deadline = time.monotonic() + WAIT * 4
        while int(r.hget(store.keys.stats, "succeeded") or 0) < N:
            assert time.monotonic() < deadline, "the burst did not finish"
            time.sleep(0.01)
        assert eng.wait_idle(WAIT)
    stats = r.hgetall(store.keys.stats)
    assert int(stats["claimed"]) == N and int(stats["succeeded"]) == N
    assert max(sizes) > 2  # more than the two workers in one claim
    assert sum(sizes) == N
    assert r.hlen(store.keys.running) == 0 and r.zcard(store.keys.lease) == 0
    assert {store.get(f"b{i}").runs for i in (0, N // 2, N - 1)} == {1}
    store.close()


def test_without_look_ahead_a_claim_never_exceeds_the_free_workers(redis_url, redis_ns):
    store = RedisStore(redis_url, redis_ns, resync=30)
    sizes: list[int] = []
    claimed = store.claimed  # every claim reply is read here (with acks riding too)

    def spy(text, request):  # type: ignore[no-untyped-def]
        assert sum(request.capacity.values()) <= 2
        batch = claimed(text, request)
        sizes.append(len(batch.claims))
        return batch

    store.claimed = spy  # type: ignore[method-assign]
    store.add_many([spec(f"b{i}", After(0)) for i in range(50)])
    with Scheduler(2, store=store, lookahead=0) as eng:
        deadline = time.monotonic() + WAIT * 4
        while int(store.redis.hget(store.keys.stats, "succeeded") or 0) < 50:
            assert time.monotonic() < deadline, "the jobs did not finish"
            time.sleep(0.01)
        assert eng.wait_idle(WAIT)
    assert sum(sizes) == 50
    store.close()
