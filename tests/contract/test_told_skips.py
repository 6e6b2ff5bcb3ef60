"""The skips a claim tells of (``Claim.skipped``): what the store skipped of a recurring
job since the job's previous claim, summed, handed to the next run of it (a traced run
makes it a span event, docs/tracing.md). The same in every store.

Driven directly with a fake clock, as the store contract (tests/contract/test_store.py).
"""

from __future__ import annotations

from scheduler.model import Misfire, Overlap, Skip
from tests.conftest import START
from tests.helpers import every

ALL = {"default": 100}


def claim(store):
    return store.claim_due(ALL, None, "owner-1").claims


def told(c) -> tuple[float, float, int, str] | None:
    """The claim's told skips: first and last occurrence (s after START), count, reasons."""
    s = c.skipped
    if s is None:
        return None
    return (round(s.first - START, 3), round(s.last - START, 3), s.count, s.reason)


def test_a_misfire_skip_is_told_to_the_run_the_same_claim_makes(store, clock):
    store.add(every("r", 1, misfire=Misfire.SKIP))
    clock.advance(5.5)  # 1..4 late by more than the 1 s grace; 5 runs
    (c,) = claim(store)
    assert c.scheduled == START + 5 and told(c) == (1, 4, 4, "misfire")
    store.complete(c, None)
    clock.advance(1)
    (c,) = claim(store)
    assert told(c) is None  # told once


def test_skips_no_run_followed_are_told_to_the_next_run(store, clock):
    store.add(every("r", 10, misfire=Misfire.SKIP, misfire_grace=1))
    clock.advance(25)  # 10 and 20 missed, nothing on time: no run in this claim
    assert claim(store) == []
    clock.advance(5)
    (c,) = claim(store)
    assert c.scheduled == START + 30 and told(c) == (10, 20, 2, "misfire")


def test_overlap_skips_are_summed_for_the_run_after_the_one_that_ran_long(store, clock):
    store.add(every("r", 1))  # overlap skip, the default
    clock.advance(1)
    (first,) = claim(store)
    assert told(first) is None
    for _ in range(2):  # 2 and 3: the first still runs
        clock.advance(1)
        assert claim(store) == []
    store.complete(first, None)
    clock.advance(1)
    (c,) = claim(store)
    assert c.scheduled == START + 4 and told(c) == (2, 3, 2, "overlap")
    assert [s.count for s in store.get("r").skipped] == [1, 1]  # the record keeps each range


def test_different_reasons_are_each_named_once_in_the_order_first_recorded(store, clock):
    store.add(every("r", 1, misfire=Misfire.SKIP))
    clock.advance(1)
    (first,) = claim(store)
    clock.advance(1)
    assert claim(store) == []  # 2: overlap
    clock.advance(3.5)  # 3 and 4 missed, 5 on time but the first still runs
    assert claim(store) == []
    store.complete(first, None)
    clock.advance(1)
    (c,) = claim(store)
    assert told(c) == (2, 5, 4, "overlap,misfire")


def test_a_queued_overlap_tells_the_skip_that_came_after_it(store, clock):
    """overlap="queue": 2 is held, 3 skipped (queue full); the run of 2 is told of 3."""
    store.add(every("r", 1, overlap=Overlap.QUEUE))
    clock.advance(1)
    (first,) = claim(store)
    clock.advance(2)
    assert claim(store) == []
    store.complete(first, None)
    (c,) = claim(store)
    assert c.scheduled == START + 2 and told(c) == (3, 3, 1, "overlap-queue-full")


def test_a_replaced_definition_forgets_the_skips_of_the_old_one(store, clock):
    store.add(every("r", 10, misfire=Misfire.SKIP, misfire_grace=1))
    clock.advance(25)
    assert claim(store) == []  # 10 and 20 skipped, not told yet
    store.add(every("r", 5, misfire=Misfire.SKIP, misfire_grace=1))
    clock.advance(5)
    (c,) = claim(store)
    assert told(c) is None
    assert store.get("r").skipped == ()


def test_skip_then_sums_as_the_lua_does():
    a = Skip(1.0, 2.0, 2, "overlap")
    assert a.then(Skip(3.0, 3.0, 1, "overlap")) == Skip(1.0, 3.0, 3, "overlap")
    assert a.then(Skip(0.5, 0.5, 1, "misfire")) == Skip(0.5, 2.0, 3, "overlap,misfire")
    b = Skip(1.0, 1.0, 1, "overlap,misfire")
    assert b.then(Skip(4.0, 4.0, 1, "misfire")).reason == "overlap,misfire"
