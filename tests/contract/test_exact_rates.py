"""Issue 13, bullet 5 and the lag rule of bullet 3, on every store.

Exact rates: occurrence k of ``every=1/3`` is due at anchor + k/3 s, computed from k and
rounded up (never early): the shared store used to keep the interval as 333 whole ms, 3.6 s
early after an hour. Lag: a claim reports when its job became claimable (the later of its
due time and when it was enqueued, retried or resumed), so a past ``at`` is not "late".
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from scheduler.model import At, Every
from tests.conftest import START
from tests.helpers import spec

ALL = {"default": 100}
HOUR = 10_800  # occurrences of every=1/3 s in an hour


def claim(store):
    return store.claim_due(ALL, None, "owner-1")


def claim_next(store, clock):
    """Advance the clock to the next due instant and claim it (one claim)."""
    batch = claim(store)
    while not batch.claims:
        assert batch.next_due_in is not None
        clock.advance(max(batch.next_due_in, 0.0))
        batch = claim(store)
        if not batch.claims and batch.next_due_in == 0:
            clock.advance(0.001)  # the store clock's ms, not yet reached
    assert len(batch.claims) == 1
    return batch.claims[0]


def test_every_third_of_a_second_for_an_hour_is_never_early(store, clock, request):
    n = 300 if "fakeredis" in request.node.name else HOUR
    anchor = START + 1
    store.add(spec("third", Every(1 / 3, anchor)))
    for k in range(n):
        c = claim_next(store, clock)
        exact = Fraction(anchor) + k * Fraction(1, 3)
        assert Fraction(c.scheduled) >= exact, f"occurrence {k} early: {c.scheduled} < {exact}"
        assert clock.now() >= c.scheduled - 1e-6  # handed out at its time (float clock noise)
        # on the grid: the rounding to the store's resolution, never an accumulated drift
        assert Fraction(c.scheduled) - exact < Fraction(1, 1000)
        store.complete(c, None)
    if n == HOUR:  # the hour's last occurrence: exactly anchor + 3599 2/3 s, rounded up
        assert c.scheduled == pytest.approx(anchor + 3599.667, abs=0.0005)


def test_a_past_at_is_claimable_from_its_enqueue_time_and_not_late(store, clock):
    store.add(spec("past", At(START - 3600)))  # an hour ago: due now
    clock.advance(2)
    c = claim(store).claims[0]
    assert c.scheduled == START - 3600
    assert c.ready == START  # claimable from its enqueue: lag 2 s, not an hour


def test_a_retry_is_claimable_from_its_retry_due_time(store, clock):
    store.add(spec("r", At(START - 60)))
    c = claim(store).claims[0]
    store.fail(c, "boom", 5)
    clock.advance(7)
    c = claim(store).claims[0]
    assert c.attempt == 2
    assert c.ready == START + 5


def test_a_resumed_job_is_claimable_from_its_resume_time(store, clock):
    store.add(spec("p", At(START + 1)))
    assert store.pause("p")
    clock.advance(100)
    assert claim(store).claims == []
    assert store.resume("p")
    clock.advance(3)
    c = claim(store).claims[0]
    assert c.scheduled == START + 1
    assert c.ready == START + 100
