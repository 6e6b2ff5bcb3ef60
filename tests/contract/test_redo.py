"""An operator's redo, alike in every store: ``Client.retry``, ``retry_failed`` and
``delete`` (``Redo``, scheduler/stores/base.py). Driven directly with a fake clock."""

from __future__ import annotations

import pytest

from scheduler import Client
from scheduler.errors import JobNotFoundError
from scheduler.model import After, Commit, Every
from tests.helpers import spec

ALL = {"default": 10}


def claim(store):
    return store.claim_due(ALL, 30.0, "owner-1").claims


def test_retry_queues_a_failed_one_off_again_at_attempt_1_and_it_can_succeed(store, clock):
    client = Client(store)
    store.add(spec("a", After(0)))
    (c,) = claim(store)
    assert store.fail(c, "boom", retry_in=None) is Commit.OK
    assert store.get("a").state == "failed"
    assert client.retry_failed(task="no.such.task") == {}
    assert client.retry("a") == 1
    info = store.get("a")
    assert info.state == "scheduled" and info.dead_letters == ()
    (again,) = claim(store)
    assert (again.job_id, again.attempt, again.scheduled) == ("a", 1, c.scheduled)
    with pytest.raises(ValueError, match="running"):
        client.retry("a")
    assert store.complete(again, None) is Commit.OK
    assert store.get("a").state == "succeeded"
    with pytest.raises(ValueError, match="no dead letter"):
        client.retry("a")
    with pytest.raises(JobNotFoundError):
        client.retry("nope")


def test_retry_failed_takes_every_job_with_dead_letters(store, clock):
    client = Client(store)
    store.add(spec("x", After(0)))
    store.add(spec("tick", Every(10)))
    clock.advance(10)
    for c in claim(store):
        assert store.fail(c, "boom", retry_in=None) is Commit.OK
    assert client.retry_failed() == {"tick": 1, "x": 1}
    assert sorted(c.job_id for c in claim(store)) == ["tick", "x"]


def test_delete_removes_a_job_and_a_second_delete_finds_nothing(store, clock):
    client = Client(store)
    store.add(spec("d", After(5)))
    assert client.delete("d") is True
    assert store.get("d") is None
    assert client.delete("d") is False
    clock.advance(5)
    assert claim(store) == []


def test_retry_of_a_replaced_definitions_dead_letter_then_trigger(store, clock):
    """The retried run (of a definition replaced while it ran) and the current one's own
    run are two runs: a trigger brings the current one forward and leaves the retry be."""
    store.add(spec("a", After(0)))
    (c,) = claim(store)
    assert store.add(spec("a", After(5))).outcome == "replaced"
    assert store.fail(c, "boom", retry_in=None) is Commit.OK
    assert Client(store).retry("a") == 1
    clock.advance(1)
    assert store.trigger("a") is True
    runs = sorted((x.scheduled, x.attempt) for x in claim(store))
    assert runs == [(c.scheduled, 1), (c.scheduled + 1, 1)]
