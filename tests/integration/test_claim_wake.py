"""claim.lua's reply carries the microseconds past its "now" (rounded down to the ms), so
the store's "ask again in" is not late by up to 1 ms (lag at a steady trickle)."""

from __future__ import annotations

import pytest

from scheduler.stores.redis.claiming.claim_reply import claim_reply


def test_the_reply_header_carries_the_microseconds_past_now():
    reply = claim_reply("req\n1000 1005 3 -1 0 0 1 400\ne")
    assert (reply.now, reply.next, reply.fence, reply.epoch, reply.now_us) == (
        1000,
        1005,
        3,
        "e",
        400,
    )


def test_a_reply_without_them_reads_as_zero():
    """A resend record written by a script older than the field."""
    assert claim_reply("req\n1000 1005 3 -1 0 0 1\ne").now_us == 0


@pytest.mark.redis
def test_next_due_in_counts_from_redis_time_to_the_microsecond(redis_url, redis_ns):
    """Redis TIME read just before and just after a claim brackets the script's own: the
    due time minus "next due in" must fall between the two. Rounded to the ms, it fell up
    to 1 ms after the second one (a wake up to 1 ms late) in most tries."""
    from scheduler.model import After
    from scheduler.stores.redis import RedisStore
    from tests.helpers import spec

    store = RedisStore(redis_url, redis_ns)
    try:
        store.add(spec("later", After(30)))
        ((_, due_ms),) = store.redis.zrange(store.keys.due("default"), 0, 0, withscores=True)
        for _ in range(20):
            before = _redis_time(store)
            batch = store.claim_due({"default": 1}, None, "o")
            after = _redis_time(store)
            assert batch.claims == [] and batch.next_due_in is not None
            assert before - 1e-6 <= due_ms / 1000 - batch.next_due_in <= after + 1e-6
    finally:
        store.close()


def _redis_time(store) -> float:
    sec, us = store.redis.time()
    return sec + us / 1e6
