"""Overlap is judged against invocations that have started, alike in every store
(docs/guarantees.md, "Overlap"): an occurrence due in the same claim as an earlier run of
its job waits for a later claim, and is judged then. Driven directly with a fake clock."""

from __future__ import annotations

from scheduler.model import Commit, Every, Misfire, Overlap
from tests.conftest import START
from tests.helpers import spec

TWO = {"default": 2}


def claim(store):
    return store.claim_due(TWO, 30.0, "owner-1")


def test_an_occurrence_due_in_the_same_claim_waits_and_runs_after_the_first(store, clock):
    store.add(spec("tick", Every(1), misfire=Misfire.SKIP, overlap=Overlap.SKIP))
    clock.advance(2)  # a claim 1 s late, room for 2: occurrences +1 s and +2 s are due
    batch = claim(store)
    assert [c.scheduled - START for c in batch.claims] == [1.0]
    assert store.get("tick").skipped == ()  # not an overlap: the first has not started
    assert store.complete(batch.claims[0], None) is Commit.OK
    (second,) = claim(store).claims
    assert second.scheduled - START == 2.0
    assert store.get("tick").skipped == ()


def test_it_is_skipped_as_overlap_when_the_first_still_runs_at_the_next_claim(store, clock):
    store.add(spec("tick", Every(1), misfire=Misfire.SKIP, overlap=Overlap.SKIP))
    clock.advance(2)
    (first,) = claim(store).claims
    assert claim(store).claims == []  # a later claim: the first runs, so +2 s is skipped
    assert [s.reason for s in store.get("tick").skipped] == ["overlap"]
    assert store.complete(first, None) is Commit.OK
