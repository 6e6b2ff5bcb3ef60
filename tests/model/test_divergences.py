"""Where the two stores disagree and should not (issue 31): one minimal, deterministic
sequence per divergence, each run on a ``MemoryStore`` and a ``RedisStore`` (fakeredis,
and a real ``redis-server``) on one fake clock, asserting that they agree.

Each is ``xfail(strict=True)``: it fails today and turns into a failure the day the
stores agree, which is the signal to drop the xfail here and the divergence's guard in
``test_differential.py`` (its ``KNOWN_DIVERGENCES`` names these tests). They are the
hand-off to whoever fixes the stores; where issue 31 decided the semantics, the test
asserts it too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest

from scheduler.client import Client
from scheduler.flow import Limit
from scheduler.model import (
    After,
    At,
    ClaimBatch,
    Cron,
    Every,
    JobSpec,
    Misfire,
    Overlap,
    RetryPolicy,
    TaskRef,
)
from scheduler.stores.base import Store
from scheduler.stores.memory import MemoryStore
from scheduler.testing import FakeClock
from tests.conftest import START

OWNER = "owner-1"


class Pair(NamedTuple):
    clock: FakeClock
    mem: Store
    red: Store

    def both(self, op: Callable[[Store], Any]) -> tuple[Any, Any]:
        return op(self.mem), op(self.red)


@pytest.fixture(
    params=[
        pytest.param("fakeredis", marks=pytest.mark.fakeredis),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    """A MemoryStore and a RedisStore (fakeredis or a real server) on one fake clock."""
    from scheduler.stores.redis import RedisStore

    clock = FakeClock(start=START)
    if request.param == "fakeredis":
        from tests.fakeredis_fixtures import fakeredis_client

        logging.disable(logging.WARNING)  # fakeredis has no INFO: said once per store
        red = RedisStore(fakeredis_client(), "fake", clock=clock)
    else:
        url = request.getfixturevalue("redis_url")
        red = RedisStore(url, request.getfixturevalue("redis_ns"), clock=clock)
    try:
        yield Pair(clock, MemoryStore(clock), red)
    finally:
        red.close()
        logging.disable(logging.NOTSET)


def job(job_id: str, schedule: Any, **kw: Any) -> JobSpec:
    return JobSpec(job_id=job_id, target=TaskRef("t.x"), schedule=schedule, **kw)


def claims(batch: ClaimBatch) -> list[tuple[str, float, int]]:
    return [(c.job_id, c.scheduled, c.attempt) for c in batch.claims]


def claim(p: Pair, capacity: int = 10, lease: float = 5) -> tuple[Any, Any]:
    return p.both(lambda s: s.claim_due({"default": capacity}, lease, OWNER))


def issue31(what: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, reason=f"issue 31: {what}")


# ---- pause holds every new start, retries and re-runs included -----------------------------


def test_paused_retry_waits_for_resume(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("a", After(0), retry=RetryPolicy(max_attempts=3))))
    m, r = claim(pair)
    assert pair.both(lambda s: s.pause("a")) == (True, True)
    assert pair.mem.fail(m.claims[0], "boom", 1) == pair.red.fail(r.claims[0], "boom", 1)
    pair.clock.advance(1)
    m, r = claim(pair)
    assert claims(m) == claims(r) == []  # paused: nothing starts


def test_paused_lease_expiry_waits_for_resume(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("a", After(0))))
    claim(pair, lease=5)
    assert pair.both(lambda s: s.pause("a")) == (True, True)
    pair.clock.advance(5)
    m, r = claim(pair)  # reaps the lease: the re-run waits for resume
    assert claims(m) == claims(r) == []


def test_pause_after_expiry_before_reap_waits_for_resume(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("a", After(0))))
    claim(pair, lease=5)
    pair.clock.advance(5)
    assert pair.both(lambda s: s.pause("a")) == (True, True)
    m, r = claim(pair)
    assert claims(m) == claims(r) == []


# ---- overlap and catch-up ------------------------------------------------------------------


def test_overlap_inside_one_claim(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("r", Every(1), misfire=Misfire.SKIP, overlap=Overlap.SKIP)))
    pair.clock.advance(2)
    m, r = claim(pair, capacity=2)
    assert claims(m) == claims(r)
    assert pair.mem.get("r").skipped == pair.red.get("r").skipped  # type: ignore[union-attr]


def test_cron_catch_up_in_one_claim(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"))))
    pair.clock.advance(3_600)
    m, r = claim(pair)
    assert claims(m) == claims(r) != []


def test_a_deferred_occurrence_does_not_hold_its_lane(pair: Pair) -> None:
    """Both stores used to stop a lane at an occurrence deferred behind its series' run
    claimed in the same call: a job due after it waited for that run to end."""
    spec = job("r", Every(1), misfire=Misfire.CATCH_UP, overlap=Overlap.SKIP)
    pair.both(lambda s: s.add(spec))
    pair.clock.advance(3)  # occurrences at +1, +2, +3 due
    pair.both(lambda s: s.add(job("o", After(0))))
    pair.both(lambda s: s.add(job("p", After(0.5))))
    m, r = claim(pair, capacity=3)
    assert claims(m) == claims(r) == [("r", START + 1, 1), ("o", START + 3, 1)]
    assert m.next_due_in == r.next_due_in == 0.5  # "p", not the deferred occurrences


def test_ready_of_a_caught_up_occurrence(pair: Pair) -> None:
    """A series' next occurrence is ready at its due time, not when it was pushed."""
    spec = job("r", Every(1), misfire=Misfire.CATCH_UP, overlap=Overlap.SKIP)
    pair.both(lambda s: s.add(spec))
    pair.clock.advance(3)
    m, r = claim(pair, capacity=1)
    assert pair.mem.complete(m.claims[0], None) == pair.red.complete(r.claims[0], None)
    m, r = claim(pair, capacity=1)
    assert [c.ready for c in m.claims] == [c.ready for c in r.claims] == [START + 2]


def test_cron_rerun_and_on_time_occurrence_after_a_gap(pair: Pair) -> None:
    """A re-run goes first (docs/guarantees.md, "Overlap"): the claim that reaps the lease
    claims the re-run alone and leaves the series' due occurrence due; the next claim finds
    the re-run still running and judges the occurrence by its overlap policy (skip). Memory
    used to claim both at once; Redis skipped the on-time one in the claim it planned."""
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"))))
    pair.clock.advance(20)  # START is 00:16:40: the first occurrence is at 00:17:00
    m, r = claim(pair, lease=5)
    assert claims(m) == claims(r) == [("c", START + 20, 1)]
    pair.clock.advance(3_600)  # the lease expired long ago; 59 occurrences missed
    m1, r1 = claim(pair)
    assert claims(m1) == claims(r1) == [("c", START + 20, 2)]  # the re-run, alone
    assert pair.mem.get("c").skipped == pair.red.get("c").skipped == ()  # type: ignore[union-attr]
    m2, r2 = claim(pair)
    assert claims(m2) == claims(r2) == []
    skipped = [(s.first - START, s.last - START, s.count, s.reason) for s in skips(pair, "c")]
    assert skipped == [
        (80, 3_500, 58, "misfire"),
        (3_560, 3_560, 1, "overlap"),  # within its grace (60 s): on time, the re-run runs
        (3_620, 3_620, 1, "overlap"),
    ]


def skips(p: Pair, job_id: str) -> tuple[Any, ...]:
    """The job's skipped ranges, the same in both stores."""
    m, r = p.both(lambda s: s.get(job_id))
    assert m is not None and r is not None and m.skipped == r.skipped
    return m.skipped


def _every_rerun_due_with_an_occurrence(pair: Pair, **kw: Any) -> tuple[Any, Any]:
    """Every(5): the occurrence at +5 claimed with a 5 s lease; at +10 the claim that reaps
    it finds the re-run and the occurrence at +10 due: the re-run alone is claimed."""
    pair.both(lambda s: s.add(job("r", Every(5), **kw)))
    pair.clock.advance(5)
    m, r = claim(pair, lease=5)
    assert claims(m) == claims(r) == [("r", START + 5, 1)]
    pair.clock.advance(5)
    m, r = claim(pair)
    assert claims(m) == claims(r) == [("r", START + 5, 2)]
    assert skips(pair, "r") == ()
    nm, nr = pair.both(lambda s: s.get("r"))
    assert nm is not None and nr is not None and nm.next_run == nr.next_run == START + 10
    return m.claims[0], r.claims[0]


def test_every_rerun_goes_first_then_overlap_skip(pair: Pair) -> None:
    cm, cr = _every_rerun_due_with_an_occurrence(pair, overlap=Overlap.SKIP)
    m, r = claim(pair)  # the re-run still runs: the occurrence is judged, skipped
    assert claims(m) == claims(r) == []
    assert [(s.first, s.reason) for s in skips(pair, "r")] == [(START + 10, "overlap")]
    assert pair.mem.complete(cm, None) == pair.red.complete(cr, None)
    pair.clock.advance(5)
    m, r = claim(pair)
    assert claims(m) == claims(r) == [("r", START + 15, 1)]


def test_every_rerun_goes_first_then_overlap_allow(pair: Pair) -> None:
    _every_rerun_due_with_an_occurrence(pair, overlap=Overlap.ALLOW)
    m, r = claim(pair)  # allowed beside the running re-run, in the next claim
    assert claims(m) == claims(r) == [("r", START + 10, 1)]
    assert skips(pair, "r") == ()


def test_every_rerun_goes_first_then_catch_up_waits(pair: Pair) -> None:
    spec = {"overlap": Overlap.SKIP, "misfire": Misfire.CATCH_UP}
    cm, cr = _every_rerun_due_with_an_occurrence(pair, **spec)
    m, r = claim(pair)  # catch_up skips nothing: parked until the re-run ends
    assert claims(m) == claims(r) == []
    assert pair.mem.complete(cm, None) == pair.red.complete(cr, None)
    m, r = claim(pair)
    assert claims(m) == claims(r) == [("r", START + 10, 1)]
    assert skips(pair, "r") == ()


def test_a_retry_claimed_first_holds_the_occurrence_met_after_it(pair: Pair) -> None:
    """A retry due before the occurrence is claimed first in the claim; the occurrence met
    after it waits, overlap "allow" too, and the lane's other due jobs go on."""
    pair.both(lambda s: s.add(job("r", Every(5), overlap=Overlap.ALLOW, retry=RetryPolicy(3))))
    pair.clock.advance(5)
    m, r = claim(pair)
    assert pair.mem.fail(m.claims[0], "boom", 3) == pair.red.fail(r.claims[0], "boom", 3)
    pair.clock.advance(5)  # the retry is due at +8, the occurrence at +10
    pair.both(lambda s: s.add(job("o", After(0))))
    m, r = claim(pair)
    assert claims(m) == claims(r) == [("r", START + 5, 2), ("o", START + 10, 1)]
    m, r = claim(pair)
    assert claims(m) == claims(r) == [("r", START + 10, 1)]


def test_cron_plans_take_capacity(pair: Pair) -> None:
    """Two cron jobs in one lane, both several occurrences behind, claimed one at a time:
    the first is planned and runs, in its place in line; the second is not touched (a
    series sent to be planned takes a place of the claim, as the run it will make)."""
    for j in ("a", "b"):
        pair.both(lambda s, j=j: s.add(job(j, Cron("* * * * *"))))
    pair.clock.advance(125)  # 00:17:00 missed (past its grace), 00:18:00 due
    m, r = claim(pair, capacity=1)
    assert claims(m) == claims(r) == [("a", START + 80, 1)]
    nm, nr = pair.both(lambda s: s.get("b"))
    assert nm is not None and nr is not None
    assert (nm.next_run, nm.skipped) == (nr.next_run, nr.skipped)


def test_a_plan_that_runs_nothing_gives_its_place_back(pair: Pair) -> None:
    """An hourly cron job two hours behind, claimed with room for one: its plan skips what
    it missed (misfire skip) and runs nothing now; the claim says when to ask next (its
    next hour), as in process (the plan had taken the claim's one place)."""
    pair.both(lambda s: s.add(job("h", Cron("0 * * * *"))))
    pair.clock.advance(7_400)
    m, r = claim(pair, capacity=1)
    assert claims(m) == claims(r) == []
    assert m.next_due_in == r.next_due_in is not None


# ---- the smaller ones ----------------------------------------------------------------------


def test_trigger_of_a_released_one_off(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("a", After(0))))
    m, r = claim(pair)
    assert pair.mem.release(m.claims[0]) == pair.red.release(r.claims[0])
    mt, rt = pair.both(lambda s: s.trigger("a"))
    assert mt == rt


def test_trigger_after_an_operator_retry(pair: Pair) -> None:
    """An operator's retry queues a dead-lettered one-off's run again as a retry, due at
    once: trigger has nothing to bring forward (memory answered True, Redis False)."""
    pair.both(lambda s: s.add(job("a", After(0))))
    m, r = claim(pair)
    assert pair.mem.fail(m.claims[0], "boom", None) == pair.red.fail(r.claims[0], "boom", None)
    pair.clock.advance(1)
    assert pair.both(lambda s: Client(s).retry("a")) == (1, 1)
    assert pair.both(lambda s: s.trigger("a")) == (False, False)
    nm, nr = pair.both(lambda s: s.get("a"))
    assert nm is not None and nr is not None
    assert (nm.state, nm.next_run) == (nr.state, nr.next_run) == ("scheduled", START + 1)
    m, r = claim(pair)
    assert claims(m) == claims(r) == [("a", START, 1)]  # its first scheduled time, at once


def test_next_run_of_a_released_one_off(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("a", After(1))))
    pair.clock.advance(1)
    m, r = claim(pair)
    pair.mem.release(m.claims[0])
    pair.red.release(r.claims[0])
    nm, nr = pair.both(lambda s: s.get("a").next_run)
    assert nm == nr == START + 1


def test_next_run_of_a_one_off_waiting_for_its_retry(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("a", After(0), retry=RetryPolicy(max_attempts=2))))
    m, r = claim(pair)
    pair.mem.fail(m.claims[0], "boom", 5)
    pair.red.fail(r.claims[0], "boom", 5)
    nm, nr = pair.both(lambda s: s.get("a").next_run)
    assert nm == nr == START + 5


def test_next_run_of_a_recurring_job_waiting_for_its_retry(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("e", Every(10), retry=RetryPolicy(max_attempts=2))))
    pair.clock.advance(10)
    m, r = claim(pair)
    pair.mem.fail(m.claims[0], "boom", 1)
    pair.red.fail(r.claims[0], "boom", 1)
    nm, nr = pair.both(lambda s: s.get("e").next_run)
    assert nm == nr == START + 11


def test_due_in_of_an_unchanged_re_add_of_a_released_one_off(pair: Pair) -> None:
    spec = job("a", After(0))
    pair.both(lambda s: s.add(spec))
    m, r = claim(pair)
    pair.mem.release(m.claims[0])
    pair.red.release(r.claims[0])
    am, ar = pair.both(lambda s: s.add(spec))
    assert (am.outcome, am.due_in) == (ar.outcome, ar.due_in) == ("unchanged", 0)


def test_ready_of_a_released_invocation(pair: Pair) -> None:
    """A release does not change when the invocation became ready: its due time."""
    pair.both(lambda s: s.add(job("a", After(0))))
    pair.clock.advance(0.5)
    m, r = claim(pair)
    assert pair.mem.release(m.claims[0]) == pair.red.release(r.claims[0])
    pair.clock.advance(0.5)
    m, r = claim(pair)
    assert m.claims[0].ready == r.claims[0].ready == START


def test_ready_of_a_released_occurrence(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("e", Every(10))))
    pair.clock.advance(12)
    m, r = claim(pair)
    assert pair.mem.release(m.claims[0]) == pair.red.release(r.claims[0])
    pair.clock.advance(1)
    m, r = claim(pair)
    assert [c.ready for c in m.claims] == [c.ready for c in r.claims] == [START + 10]


def test_ready_of_a_released_past_at(pair: Pair) -> None:
    """A job given a time already past is ready when it was scheduled, released or not."""
    pair.both(lambda s: s.add(job("a", At(START - 3))))
    pair.clock.advance(1)
    m, r = claim(pair)
    assert pair.mem.release(m.claims[0]) == pair.red.release(r.claims[0])
    pair.clock.advance(1)
    m, r = claim(pair)
    assert [c.ready for c in m.claims] == [c.ready for c in r.claims] == [START]


def test_ready_of_a_released_retry(pair: Pair) -> None:
    """A release does not change when a retry became ready: its own due time (Redis keeps
    its claim's ready in its RUNNING entry, then in its due member)."""
    pair.both(lambda s: s.add(job("a", After(0), retry=RetryPolicy(max_attempts=3))))
    m, r = claim(pair)
    pair.clock.advance(1)
    assert pair.mem.fail(m.claims[0], "boom", 2) == pair.red.fail(r.claims[0], "boom", 2)
    pair.clock.advance(3)
    m, r = claim(pair)  # the retry, due at START + 3
    assert pair.mem.release(m.claims[0]) == pair.red.release(r.claims[0])
    pair.clock.advance(1)
    m, r = claim(pair)
    assert [c.ready for c in m.claims] == [c.ready for c in r.claims] == [START + 3]


def test_ready_of_a_released_rerun(pair: Pair) -> None:
    """A re-run after a lost lease is ready at the reap; released, it still is."""
    pair.both(lambda s: s.add(job("a", After(0), retry=RetryPolicy(max_attempts=3))))
    claim(pair, lease=2)
    pair.clock.advance(3)
    m, r = claim(pair)  # reaped at START + 3, then claimed again
    assert pair.mem.release(m.claims[0]) == pair.red.release(r.claims[0])
    pair.clock.advance(1)
    m, r = claim(pair)
    assert claims(m) == claims(r) == [("a", START, 2)]
    assert [c.ready for c in m.claims] == [c.ready for c in r.claims] == [START + 3]


def test_ready_of_a_released_operator_retry(pair: Pair) -> None:
    """A run an operator retried is ready at the retry; released, paused and resumed, at
    the resume (a resume makes a waiting run claimable from then)."""
    pair.both(lambda s: s.add(job("a", After(0))))
    m, r = claim(pair)
    assert pair.mem.fail(m.claims[0], "boom", None) == pair.red.fail(r.claims[0], "boom", None)
    pair.clock.advance(2)
    assert pair.both(lambda s: Client(s).retry("a")) == (1, 1)
    pair.clock.advance(1)
    m, r = claim(pair)
    assert [c.ready for c in m.claims] == [c.ready for c in r.claims] == [START + 2]
    assert pair.mem.release(m.claims[0]) == pair.red.release(r.claims[0])
    pair.clock.advance(1)
    m, r = claim(pair)
    assert [c.ready for c in m.claims] == [c.ready for c in r.claims] == [START + 2]
    pair.both(lambda s: s.pause("a"))
    assert pair.mem.release(m.claims[0]) == pair.red.release(r.claims[0])
    pair.clock.advance(1)
    pair.both(lambda s: s.resume("a"))
    m, r = claim(pair)
    assert [c.ready for c in m.claims] == [c.ready for c in r.claims] == [START + 5]


def test_ready_of_a_run_released_after_a_resume(pair: Pair) -> None:
    """A pause and resume while a run is claimed does not make it ready later: the run
    did not wait meanwhile; released, it keeps its claim's ready."""
    pair.both(lambda s: s.add(job("a", After(0))))
    m, r = claim(pair)
    pair.clock.advance(1)
    pair.both(lambda s: s.pause("a"))
    pair.clock.advance(1)
    pair.both(lambda s: s.resume("a"))
    pair.clock.advance(1)
    assert pair.mem.release(m.claims[0]) == pair.red.release(r.claims[0])
    m, r = claim(pair)
    assert [c.ready for c in m.claims] == [c.ready for c in r.claims] == [START]


def test_ready_of_a_released_occurrence_after_a_resume(pair: Pair) -> None:
    """The same for a series' occurrence (queued as a re-run when released)."""
    pair.both(lambda s: s.add(job("e", Every(1))))
    pair.clock.advance(2)
    m, r = claim(pair)
    pair.both(lambda s: s.pause("e"))
    pair.clock.advance(0.5)
    pair.both(lambda s: s.resume("e"))
    assert pair.mem.release(m.claims[0]) == pair.red.release(r.claims[0])
    m, r = claim(pair, capacity=1)
    assert claims(m) == claims(r) == [("e", START + 1, 1)]
    assert [c.ready for c in m.claims] == [c.ready for c in r.claims] == [START + 1]


def test_order_of_a_reaped_rerun(pair: Pair) -> None:
    """A re-run after a lost lease is queued at the reap (due then), behind what was queued
    before it: FIFO among entries due at one instant, in both stores. (They once seemed to
    differ here, with the new job in another lane: order across lanes is by design.)"""
    pair.both(lambda s: s.add(job("a", After(0))))
    claim(pair, lease=5)
    pair.clock.advance(5)
    pair.both(lambda s: s.add(job("b", After(0))))  # due at the reap's instant, in a's lane
    m, r = claim(pair, capacity=2)
    assert claims(m) == claims(r) == [("b", START + 5, 1), ("a", START, 2)]
    assert [c.ready for c in m.claims] == [c.ready for c in r.claims] == [START + 5] * 2


def test_order_within_each_lane(pair: Pair) -> None:
    """By design only the order within a lane is the same (lanes are separate pools)."""
    pair.both(lambda s: s.add(job("b", After(0), lane="other")))
    pair.both(lambda s: s.add(job("a", After(0))))
    pair.both(lambda s: s.add(job("c", After(0), lane="other")))
    m, r = pair.both(lambda s: s.claim_due({"default": 2, "other": 2}, 5, OWNER))
    for lane in ("default", "other"):
        in_lane = [c for c in claims(m) if pair.mem.get(c[0]).lane == lane]  # type: ignore[union-attr]
        assert in_lane == [c for c in claims(r) if pair.red.get(c[0]).lane == lane]  # type: ignore[union-attr]
    assert [c[0] for c in claims(m)] == ["b", "a", "c"]  # submission order across lanes
    assert [c[0] for c in claims(r)] == ["a", "b", "c"]  # lane by lane


def test_next_due_in_after_a_replaced_retry(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("a", After(0), retry=RetryPolicy(max_attempts=2))))
    m, r = claim(pair)
    assert pair.mem.fail(m.claims[0], "boom", 0.5) == pair.red.fail(r.claims[0], "boom", 0.5)
    pair.both(lambda s: s.add(job("a", After(0), lane="other")))  # replaced
    m, r = pair.both(lambda s: s.claim_due({"default": 1, "other": 1}, 5, OWNER))
    assert claims(m) == claims(r)
    assert m.next_due_in == r.next_due_in == 5  # the new claim's lease


# ---- next_run and next_due_in: the earliest new start, re-runs included -----------------


def test_next_run_of_a_triggered_series(pair: Pair) -> None:
    """A triggered run of a series is its next start, before the series' next time."""
    pair.both(lambda s: s.add(job("e", Every(60))))
    pair.clock.advance(1)
    assert pair.both(lambda s: s.trigger("e")) == (True, True)
    assert pair.both(lambda s: s.get("e").next_run) == (START + 1, START + 1)  # type: ignore[union-attr]


def test_next_run_of_a_released_series_run(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("e", Every(10))))
    pair.clock.advance(10)
    m, r = claim(pair)
    assert pair.mem.release(m.claims[0]) == pair.red.release(r.claims[0])
    assert pair.both(lambda s: s.get("e").next_run) == (START + 10, START + 10)  # type: ignore[union-attr]


def failed_once(pair: Pair) -> None:
    """One-off "a" (3 attempts) claimed and failed: its retry due at START + 0.5."""
    pair.both(lambda s: s.add(job("a", After(0), retry=RetryPolicy(max_attempts=3))))
    m, r = claim(pair)
    assert pair.mem.fail(m.claims[0], "boom", 0.5) == pair.red.fail(r.claims[0], "boom", 0.5)


def test_next_run_of_a_paused_retry(pair: Pair) -> None:
    """Paused: nothing starts until resume, so no next run; resumed: the retry's time."""
    failed_once(pair)
    assert pair.both(lambda s: s.pause("a")) == (True, True)
    assert pair.both(lambda s: s.get("a").next_run) == (None, None)  # type: ignore[union-attr]
    assert pair.both(lambda s: s.resume("a")) == (True, True)
    assert pair.both(lambda s: s.get("a").next_run) == (START + 0.5, START + 0.5)  # type: ignore[union-attr]


def test_next_due_in_of_a_paused_retry(pair: Pair) -> None:
    failed_once(pair)
    assert pair.both(lambda s: s.pause("a")) == (True, True)
    m, r = claim(pair)
    assert m.next_due_in == r.next_due_in is None  # nothing wakes for a paused job
    assert pair.both(lambda s: s.resume("a")) == (True, True)
    pair.clock.advance(0.5)
    m, r = claim(pair)
    assert claims(m) == claims(r) == [("a", START, 2)]


def test_next_due_in_of_a_retry_pushed_while_paused(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("a", After(0), retry=RetryPolicy(max_attempts=3))))
    m, r = claim(pair)
    assert pair.both(lambda s: s.pause("a")) == (True, True)
    assert pair.mem.fail(m.claims[0], "boom", 0.5) == pair.red.fail(r.claims[0], "boom", 0.5)
    m, r = claim(pair)
    assert m.next_due_in == r.next_due_in is None


def test_next_due_in_of_a_cancelled_retry(pair: Pair) -> None:
    failed_once(pair)
    assert pair.both(lambda s: s.cancel("a")) == (True, True)
    m, r = claim(pair)
    assert m.next_due_in == r.next_due_in is None


def test_next_run_of_a_parked_cron_catch_up(pair: Pair) -> None:
    """cron with catch_up: one occurrence runs, the next waits for it (held behind the
    run): next_run is the waiting occurrence's due time while the run runs."""
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"), misfire=Misfire.CATCH_UP)))
    pair.clock.advance(125)  # START is 00:16:40: 00:17:00 and 00:18:00 are due
    m, r = claim(pair, capacity=2)
    assert claims(m) == claims(r) == [("c", START + 20, 1)]
    assert pair.both(lambda s: s.get("c").next_run) == (START + 80, START + 80)  # type: ignore[union-attr]
    m, r = claim(pair, capacity=2)  # the next occurrence is held behind the run
    assert claims(m) == claims(r) == []
    assert pair.both(lambda s: s.get("c").next_run) == (START + 80, START + 80)  # type: ignore[union-attr]


def test_add_after_a_cancel_while_running(pair: Pair) -> None:
    """A cancelled job is over, running or not: an add of its id creates a new job."""
    spec = job("a", After(0))
    pair.both(lambda s: s.add(spec))
    m, r = claim(pair)
    assert pair.both(lambda s: s.cancel("a")) == (False, False)  # nothing was to start
    am, ar = pair.both(lambda s: s.add(spec))
    assert am.outcome == ar.outcome == "created"
    # the old invocation still commits (its outcome recorded), as one of a replaced job
    assert pair.mem.complete(m.claims[0], "old") == pair.red.complete(r.claims[0], "old")
    im, ir = pair.both(lambda s: s.get("a"))
    assert (im.state, im.runs, im.last_result) == (ir.state, ir.runs, ir.last_result)
    assert (im.state, im.next_run) == ("scheduled", START)
    m, r = claim(pair)
    assert claims(m) == claims(r) == [("a", START, 1)]  # the new job's run


def test_add_after_a_cancel_of_an_idle_job(pair: Pair) -> None:
    spec = job("a", After(1))
    pair.both(lambda s: s.add(spec))
    assert pair.both(lambda s: s.cancel("a")) == (True, True)
    am, ar = pair.both(lambda s: s.add(spec))
    assert am.outcome == ar.outcome == "created"


def test_due_in_of_a_past_at(pair: Pair) -> None:
    """A job due already answers due_in 0, never a negative one."""
    am, ar = pair.both(lambda s: s.add(job("a", At(START - 3))))
    assert am.due_in == ar.due_in == 0


def test_next_due_in_after_a_renew(pair: Pair) -> None:
    """next_due_in counts to a renewed lease's new deadline, not its old one."""
    pair.both(lambda s: s.add(job("a", After(0))))
    m, r = claim(pair, lease=5)
    pair.clock.advance(1)
    assert pair.mem.renew(m.claims, 5) == pair.red.renew(r.claims, 5)
    m, r = claim(pair)
    assert m.next_due_in == r.next_due_in == 5  # the renewed lease ends at START + 6


def test_client_retry_in_process(pair: Pair) -> None:
    pair.both(lambda s: s.add(job("a", After(0))))
    m, r = claim(pair)
    pair.mem.fail(m.claims[0], "boom", None)  # dead-lettered
    pair.red.fail(r.claims[0], "boom", None)
    assert Client(pair.red).retry("a") == 1
    assert Client(pair.mem).retry("a") == 1


@pytest.mark.parametrize("delay", [0, 10])
def test_a_one_off_brought_forward_keeps_its_place(pair: Pair, delay: float) -> None:
    """FIFO by when it was first scheduled (memory re-queued it behind "b")."""
    pair.both(lambda s: s.add(job("a", After(delay))))
    pair.clock.advance(delay / 10)  # 0: both due at once, "a" brought forward in place
    pair.both(lambda s: s.add(job("b", After(0))))
    assert pair.both(lambda s: s.trigger("a")) == (True, True)
    for expected in ("a", "b", None):  # None: nothing left at its old due time
        pair.clock.advance(0 if expected else 10)
        m, r = claim(pair, capacity=1, lease=60)
        assert claims(m) == claims(r) == ([(expected, START + delay / 10, 1)] if expected else [])


def test_operator_retry_of_a_replaced_one_off(pair: Pair) -> None:
    """Retried as a run of the current definition; the current one's run stays as it was."""
    pair.both(lambda s: s.add(job("a", After(0))))
    m, r = claim(pair, lease=30)
    assert [a.outcome for a in pair.both(lambda s: s.add(job("a", After(5))))] == ["replaced"] * 2
    assert pair.mem.fail(m.claims[0], "boom", None) == pair.red.fail(r.claims[0], "boom", None)
    assert pair.both(lambda s: Client(s).retry("a")) == (1, 1)
    assert [claims(b) for b in claim(pair, lease=30)] == [[("a", START, 1)]] * 2
    assert pair.both(lambda s: s.get("a").next_run) == (START + 5, START + 5)  # type: ignore[union-attr]
    pair.clock.advance(5)
    assert [claims(b) for b in claim(pair)] == [[("a", START + 5, 1)]] * 2


def test_grid_of_a_series_anchored_off_the_second(pair: Pair) -> None:
    """Memory put 4698.003 of a series anchored at 1000.003 a rounding error late (9e-13)."""
    pair.clock.advance(0.003)
    pair.both(lambda s: s.add(job("e", Every(2), misfire=Misfire.SKIP, overlap=Overlap.QUEUE)))
    pair.clock.advance(3_700)
    m, r = claim(pair, capacity=2)
    assert claims(m) == claims(r) == [("e", 4_698.003, 1)]
    assert m.next_due_in == r.next_due_in == 5  # 4700.003 waits for the run: the lease
    assert pair.both(lambda s: s.get("e").next_run) == (4_700.003, 4_700.003)  # type: ignore[union-attr]


def test_a_release_keeps_the_stalls(pair: Pair) -> None:
    """A release is a clean hand-back, not a stall, and forgives none."""
    pair.both(lambda s: s.add(job("a", After(0), retry=RetryPolicy(max_stalls=2))))
    claim(pair, lease=5)
    pair.clock.advance(5)
    m, r = claim(pair, lease=5)  # reaps the lease (1 stall) and claims the re-run
    assert pair.mem.release(m.claims[0]) == pair.red.release(r.claims[0])
    assert [claims(b) for b in claim(pair, lease=5)] == [[("a", START, 2)]] * 2
    pair.clock.advance(5)
    assert [claims(b) for b in claim(pair)] == [[], []]  # the second stall: dead-lettered
    assert pair.both(lambda s: len(s.get("a").dead_letters)) == (1, 1)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("misfire", "overlap"), [(Misfire.CATCH_UP, Overlap.SKIP), (Misfire.SKIP, Overlap.QUEUE)]
)
def test_ready_of_a_held_occurrence_after_resume(
    pair: Pair, misfire: Misfire, overlap: Overlap
) -> None:
    """An occurrence due while its job was paused, then held behind a run (catch_up parks
    the series, overlap queue queues it), is ready when the job was resumed: a hold does
    not move it back to its due time."""
    spec = job("r", Every(1), misfire=misfire, overlap=overlap)
    pair.both(lambda s: s.add(spec))
    pair.clock.advance(0.001)
    pair.both(lambda s: s.pause("r"))
    pair.both(lambda s: s.trigger("r"))
    pair.clock.advance(1)
    pair.both(lambda s: s.resume("r"))  # at START + 1.001; the occurrence was due at + 1
    m, r = claim(pair, capacity=2)
    assert claims(m) == claims(r) == [("r", START + 0.001, 1)]  # the trigger's; + 1 held
    assert pair.mem.complete(m.claims[0], None) == pair.red.complete(r.claims[0], None)
    m, r = claim(pair, capacity=1)  # the run ended: the held occurrence is released
    assert claims(m) == claims(r) == [("r", START + 1, 1)]
    assert [c.ready for c in m.claims] == [c.ready for c in r.claims] == [START + 1.001]


def test_overlap_across_a_planned_claim(pair: Pair) -> None:
    """Cron "c" back from a gap needs a plan (Redis: a second call in the same claim);
    "e" (every 1 s) is claimed at 1030 in the first call and its 1031 occurrence is due:
    both leave it due, judged at the next claim (Redis: the second call knows the fences
    the first was handed, lua/include/admit.lua, claimed_before)."""
    pair.both(lambda s: s.add(job("c", Cron("*/10 * * * * *"))))
    pair.both(lambda s: s.add(job("e", Every(1))))
    pair.clock.advance(31)
    m, r = claim(pair, capacity=4)
    assert sorted(claims(m)) == sorted(claims(r)) == [("c", START + 30, 1), ("e", START + 30, 1)]
    im, ir = pair.both(lambda s: s.get("e"))
    assert (im.skipped, im.next_run) == (ir.skipped, ir.next_run)  # type: ignore[union-attr]


def test_a_rerun_goes_first_across_a_planned_claim(pair: Pair) -> None:
    """ "e" (every 1 s, overlap allow) has a lease-expired re-run due beside its 1002
    occurrence, and cron "c" needs a plan: the re-run goes first and the occurrence waits
    for the next claim in both stores (Redis: the second claim.lua call reads e's `rerun`
    fence, lua/include/defer.lua), where Redis ran 1031 and 1032 in that claim."""
    pair.both(lambda s: s.add(job("e", Every(1), overlap=Overlap.ALLOW)))
    pair.clock.advance(1)
    m, r = claim(pair, capacity=1, lease=5)
    assert claims(m) == claims(r) == [("e", START + 1, 1)]
    pair.both(lambda s: s.add(job("c", Cron("*/10 * * * * *"))))
    pair.clock.advance(31)
    m, r = claim(pair, capacity=6)
    assert claims(m) == claims(r) == [("c", START + 30, 1), ("e", START + 1, 2)]
    im, ir = pair.both(lambda s: s.get("e"))
    assert (im.skipped, im.next_run) == (ir.skipped, ir.next_run) == ((), START + 2)  # type: ignore[union-attr]


def test_a_rate_limit_across_a_planned_claim(pair: Pair) -> None:
    """Key "k" may start 2 per 5 s. Its priority-0 queue starts "r" (every 1 s; its next
    occurrence waits for that run), its priority -1 queue "o", which takes the last start;
    cron "c" needs a plan (Redis: a second claim.lua call). The priority-0 queue was served
    before the rate ran out: its turn stays, and both stores ask again at once (in process
    one pass; the second call leaves a turn the first call's starts hold back,
    lua/include/turns.lua). Found by the long differential run."""
    pair.both(lambda s: s.set_limit("k", Limit(rate=2, period=5.0)))
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"))))
    kw: dict[str, Any] = {"lane": "other", "limit_key": "k"}
    every = job("r", Every(1), misfire=Misfire.CATCH_UP, overlap=Overlap.SKIP, **kw)
    pair.both(lambda s: s.add(every))
    pair.both(lambda s: s.add(job("o", After(0), priority=-1, **kw)))
    pair.clock.advance(3_700)
    m, r = pair.both(lambda s: s.claim_due({"default": 3, "other": 3}, 5, OWNER))
    assert sorted(claims(m)) == sorted(claims(r))
    assert sorted(c.job_id for c in m.claims) == ["c", "o", "r"]
    assert m.next_due_in == r.next_due_in == 0


def test_order_across_keys_under_a_planned_claim(pair: Pair) -> None:
    """Cron "c" (key "k", priority 1) needs a plan; "q" (key "k") and "z" (key "k2") are
    due at priority 0 with equal turns: "q" goes first (key byte order). Redis stops its
    first call where it sent "c" to be planned and claims the rest in its second, after
    "c" (lua/include/turns.lua), so another key does not go ahead of "k"'s queues."""
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"), lane="other", limit_key="k", priority=1)))
    pair.both(lambda s: s.set_limit("k", Limit(rate=2, period=5.0)))
    for job_id, key in (("q", "k"), ("z", "k2")):
        pair.both(lambda s: s.add(job(job_id, After(0), lane="other", limit_key=key)))
    pair.clock.advance(3_700)
    m, r = pair.both(lambda s: s.claim_due({"other": 3}, 5, OWNER))
    assert [c.job_id for c in m.claims] == [c.job_id for c in r.claims] == ["c", "q", "z"]


def test_order_in_another_lane_under_a_planned_claim(pair: Pair) -> None:
    """The same with the planned series in lane "other" and "q", "z" in "default" (claimed
    after it): Redis holds the rest of the claim, not only the series' lane."""
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"), lane="other", limit_key="k", priority=1)))
    pair.both(lambda s: s.set_limit("k", Limit(rate=2, period=5.0)))
    for job_id, key in (("q", "k"), ("z", "k2")):
        pair.both(lambda s: s.add(job(job_id, After(0), limit_key=key)))
    pair.clock.advance(3_700)
    m, r = pair.both(lambda s: s.claim_due({"other": 3, "default": 3}, 5, OWNER))
    assert [c.job_id for c in m.claims] == [c.job_id for c in r.claims] == ["c", "q", "z"]


def test_a_planned_claim_holds_the_rest_of_the_claim(pair: Pair) -> None:
    """Every key may run one at a time; cron "c" (key "k1") needs a plan, "a" (key "lit",
    in its lane after it) and "o" (key "lit", lane "other") are due. In process the claim
    goes lane by lane: "c", "a", and "o" waits for "lit"'s slot. Redis stops its first
    call where "c" is sent to be planned, so "o" does not take the slot ahead of "a"
    (lua/include/turns.lua). Found by the long differential run."""
    pair.both(lambda s: s.set_limit("*", Limit(concurrency=1)))
    pair.clock.advance(51.001)
    pair.both(lambda s: s.add(job("a", At(START + 81.001), limit_key="lit")))
    pair.both(lambda s: s.add(job("o", After(0), lane="other", limit_key="lit")))
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"), limit_key="k1")))
    pair.clock.advance(125)
    m, r = pair.both(lambda s: s.claim_due({"default": 2, "other": 2}, 5, OWNER))
    assert [c.job_id for c in m.claims] == [c.job_id for c in r.claims] == ["c", "a"]
    assert m.next_due_in == r.next_due_in == 5


def test_an_empty_queue_held_back_by_its_rate_has_no_turn(pair: Pair) -> None:
    """Key "k1" may start 1 a second, the others ("*") 2 a second and 1 at a time; "j"
    (k1) and cron "c" (k2, back from a gap: planned) are claimed. k1's queue is empty and
    its rate used up: it has no turn (a push gives it one), so neither store asks again
    before the leases end (scheduler/stores/memory/flow.py, lua/include/turns.lua). Found
    by the long differential run (in process asked again when k1's rate allowed)."""
    pair.both(lambda s: s.set_limit("k1", Limit(rate=1, period=1.0)))
    pair.both(lambda s: s.set_limit("*", Limit(rate=2, period=1.0, concurrency=1)))
    pair.clock.advance(0.501)
    pair.both(lambda s: s.add(job("j", After(0), limit_key="k1")))
    pair.both(lambda s: s.add(job("c", Cron("*/10 * * * * *"), limit_key="k2")))
    pair.clock.advance(61)
    m, r = pair.both(lambda s: s.claim_due({"default": 3}, 5, OWNER))
    assert [c.job_id for c in m.claims] == [c.job_id for c in r.claims] == ["j", "c"]
    assert m.next_due_in == r.next_due_in == 5


def test_a_planned_series_keeps_its_turn_for_the_next_call(pair: Pair) -> None:
    """Jobs with {"c": 1} get key "c:1": "j" is added so, then cron "c" (due 00:17, START
    + 20) joins its queue, then "j" is replaced with key "k1"; "c:1" and "k1" have equal
    turns, "c:1" first by its bytes. One place: in process "c" takes it. Redis's first
    call takes the place for "c" and plans it; its queue now keeps its turn (not "now",
    behind "k1"), so the next call claims "c", not "j" (lua/include/turns.lua). Found by
    the long differential run."""
    pair.both(lambda s: s.set_key_rule("c:{c}", task="t.x"))  # type: ignore[attr-defined]
    pair.clock.advance(0.001)
    args = TaskRef("t.x", '{"c":1}')
    pair.both(lambda s: s.add(JobSpec(job_id="j", target=args, schedule=After(0), priority=2)))
    pair.both(
        lambda s: s.add(JobSpec(job_id="c", target=args, schedule=Cron("* * * * *"), priority=2))
    )
    pair.both(lambda s: s.add(job("j", After(0), limit_key="k1", priority=2)))
    pair.clock.advance(125)
    m, r = pair.both(lambda s: s.claim_due({"default": 1, "other": 1}, 5, OWNER))
    assert [c.job_id for c in m.claims] == [c.job_id for c in r.claims] == ["c"]


def test_next_due_in_after_a_plan_that_is_not_due(pair: Pair) -> None:
    """Hourly cron "c" (key "k", priority 1, misfire skip) is back from a gap: its plan
    skips to the next hour. Both claim "q" and ask again at the lease's end (5 s): the
    plan gives "k"'s queue its first member's turn, not the 1 s its wait for the plan set
    (lua/plan.lua, include/flow.lua's turn_after_wait), as in process."""
    pair.both(lambda s: s.set_limit("k", Limit(rate=2, period=5.0)))
    kw: dict[str, Any] = {"lane": "other", "limit_key": "k"}
    pair.both(lambda s: s.add(job("c", Cron("0 * * * *"), priority=1, **kw)))
    pair.both(lambda s: s.add(job("q", After(0), **kw)))
    pair.clock.advance(3 * 3_600 + 1_200)
    m, r = pair.both(lambda s: s.claim_due({"other": 3}, 5, OWNER))
    assert claims(m) == claims(r) == [("q", START, 1)]
    assert m.next_due_in == r.next_due_in == 5


def test_order_of_a_planned_occurrence(pair: Pair) -> None:
    """Cron "c" missed its 00:17 (due at START + 20) and "a" is due at START + 30: c's
    on-time occurrence runs in the missed one's place, before "a" (Redis plans c in a
    first claim.lua call and claims it in a second, then orders the claims by place)."""
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"))))
    pair.both(lambda s: s.add(job("a", At(START + 30))))
    pair.clock.advance(3_700)
    m, r = claim(pair, capacity=2)
    assert claims(m) == claims(r) == [("c", START + 3_680, 1), ("a", START + 30, 1)]


def test_a_planned_occurrence_keeps_its_place_before_a_series_that_missed_earlier(
    pair: Pair,
) -> None:
    """Cron "c" missed 00:17 (due at START + 20) and every-second "e" missed START + 1:
    e's on-time run (START + 124) goes first, in its missed occurrence's earlier place, and
    c's planned one (START + 80) second, as in process; Redis put the planned one first
    (it ordered the two calls' claims by time). Found by the long differential run."""
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"))))
    pair.both(lambda s: s.add(job("e", Every(1))))
    pair.clock.advance(125)
    m, r = claim(pair, capacity=2)
    assert claims(m) == claims(r) == [("e", START + 124, 1), ("c", START + 80, 1)]


def test_a_resumed_series_backlog_is_ready_from_the_resume(pair: Pair) -> None:
    """A catch-up series paused and resumed after 61 s: every occurrence due before the
    resume is claimable from it (dispatch lag, docs/facades.md), the first and the ones
    after it alike; in process only the first was. Found by the long differential run."""
    spec = job("e", Every(1), misfire=Misfire.CATCH_UP, overlap=Overlap.ALLOW)
    pair.both(lambda s: s.add(spec))
    pair.clock.advance(61)
    pair.both(lambda s: s.pause("e"))
    pair.both(lambda s: s.resume("e"))
    for k in (1, 2, 3):
        m, r = claim(pair, capacity=1)
        assert claims(m) == claims(r) == [("e", START + k, 1)]
        assert [c.ready for c in m.claims] == [c.ready for c in r.claims] == [START + 61]


def test_a_resumed_job_keeps_its_place_in_line(pair: Pair) -> None:
    """ "b" (due START + 1) was scheduled before "a" was replaced to the same instant; "b"
    is paused and resumed: it keeps its place among the jobs due at once (FIFO by when it
    was scheduled, docs/guarantees.md), in process as over Redis, where the resume puts
    its due entry back as it was; in process it went to the back. Found by the long
    differential run."""
    pair.both(lambda s: s.add(job("a", After(0), lane="other")))
    pair.both(lambda s: s.add(job("b", After(1), lane="other")))
    pair.clock.advance(1)
    pair.both(lambda s: s.pause("b"))
    pair.both(lambda s: s.add(job("a", After(0), lane="other", retry=RetryPolicy(2))))
    pair.both(lambda s: s.resume("b"))
    m, r = pair.both(lambda s: s.claim_due({"other": 2}, 5, OWNER))
    assert claims(m) == claims(r) == [("b", START + 1, 1), ("a", START + 1, 1)]


def test_order_of_reruns_reaped_after_a_planned_claim(pair: Pair) -> None:
    """One-offs "b" (START) and "a" (START + 0.001) and cron "c", an hour missed. The
    second claim reaps a and b and claims c's planned occurrence and b's re-run: memory
    hands c the lower fence (it claims in place), Redis hands b the lower one (c's is
    claimed in a second script call). Both reaped by (lease expiry, token), so the third
    claim's re-runs came in different orders (memory c then b, Redis b then c); both now
    reap by lease expiry, then scheduled time, then job: b then c. Found by the long
    differential run."""
    pair.both(lambda s: s.add(job("b", After(0))))
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"))))
    pair.clock.advance(0.001)
    pair.both(lambda s: s.add(job("a", After(0))))
    pair.clock.advance(3_700)
    claim(pair, capacity=2)
    pair.clock.advance(5)
    m, r = claim(pair, capacity=2)
    assert claims(m) == claims(r) == [("c", START + 3_680, 1), ("b", START, 2)]
    pair.clock.advance(5)
    m, r = claim(pair, capacity=2)
    assert claims(m) == claims(r) == [("a", START + 0.001, 2), ("b", START, 3)]


def test_a_lease_renewed_to_its_own_deadline_is_reaped_once(pair: Pair) -> None:
    """A renew at the claim's instant sets the lease to the deadline it had: the in-process
    store's lease heap holds it twice, and its reap must take it once (it raised KeyError
    when reaps were first sorted). Found by the long differential run."""
    pair.both(lambda s: s.add(job("a", After(0))))
    pair.clock.advance(0.001)
    m, r = claim(pair, capacity=1)
    assert pair.mem.renew(m.claims, 5) == pair.red.renew(r.claims, 5)
    pair.clock.advance(5)
    m, r = claim(pair, capacity=1)
    assert claims(m) == claims(r) == [("a", START, 2)]


@pytest.mark.parametrize("ends", ["after_resume", "while_paused"])
def test_a_queued_occurrence_stays_held_across_a_pause(pair: Pair, ends: str) -> None:
    """Every 2 s, overlap=queue: the occurrence due at START + 4 waits behind the run of
    START + 2. A pause and resume while that run goes on keep it held (Redis keeps the
    job's `queued` field; in process the pause stashed it and the resume made it claimable
    beside the run). It runs when the run ends, or at the resume if the run ended while
    the job was paused. Found by the long differential run."""
    pair.both(lambda s: s.add(job("e", Every(2), overlap=Overlap.QUEUE)))
    pair.clock.advance(2)
    m, r = claim(pair, capacity=1)
    pair.clock.advance(2)
    assert claims(claim(pair, capacity=1)[0]) == claims(claim(pair, capacity=1)[1]) == []
    pair.both(lambda s: s.pause("e"))
    assert pair.mem.get("e").next_run is pair.red.get("e").next_run is None  # type: ignore[union-attr]
    if ends == "while_paused":
        assert pair.mem.complete(m.claims[0], None) == pair.red.complete(r.claims[0], None)
    pair.both(lambda s: s.resume("e"))
    m2, r2 = claim(pair, capacity=1)
    if ends == "after_resume":
        assert claims(m2) == claims(r2) == []  # the run of START + 2 goes on
        assert pair.mem.complete(m.claims[0], None) == pair.red.complete(r.claims[0], None)
        m2, r2 = claim(pair, capacity=1)
    assert claims(m2) == claims(r2) == [("e", START + 4, 1)]
    assert [c.ready for c in m2.claims] == [c.ready for c in r2.claims]


def test_a_stale_run_handed_back_after_the_job_ended(pair: Pair) -> None:
    """One-off "a" is replaced while its run goes on; the new definition's run fails for
    good, then the old run is handed back (a release: nothing of the old definition runs
    again). The job ended "failed": in process it retired as "released", over Redis it
    stayed "scheduled" with nothing pending. Found by the long differential run."""
    pair.both(lambda s: s.add(job("a", After(0))))
    old_m, old_r = claim(pair)
    pair.both(lambda s: s.add(job("a", After(0), lane="other")))
    m, r = pair.both(lambda s: s.claim_due({"other": 1}, 5, OWNER))
    assert pair.mem.fail(m.claims[0], "bang", None) == pair.red.fail(r.claims[0], "bang", None)
    assert pair.mem.release(old_m.claims[0]) == pair.red.release(old_r.claims[0])
    mi, ri = pair.both(lambda s: s.get("a"))
    assert mi is not None and ri is not None
    assert (mi.state, mi.next_run) == (ri.state, ri.next_run) == ("failed", None)


def test_a_paused_one_offs_run_handed_back_is_not_due(pair: Pair) -> None:
    """One-off "a" is paused while its first run is claimed; the run is handed back (a
    release). In process it waits in the job's stash for the resume (pause.lua's rule:
    nothing of a paused job is due or counted); over Redis release.lua put it back in its
    due set, where the next claim that met it moved it to the stash, and the readouts of due
    work (``queue_depths``, ``limit_usage``) counted it meanwhile; now release.lua stashes
    it too. Found by the long differential run once it compared ``limit_usage``."""
    from scheduler import flow

    pair.both(lambda s: s.set_limit("k", flow.limit(concurrency=1)))  # type: ignore[attr-defined]
    pair.both(lambda s: s.add(job("a", After(0), limit_key="k")))
    pair.clock.advance(0.001)
    m, r = claim(pair, capacity=1)
    pair.both(lambda s: s.pause("a"))
    assert pair.mem.release(m.claims[0]) == pair.red.release(r.claims[0])
    assert pair.mem.limit_usage() == pair.red.limit_usage()  # type: ignore[attr-defined]
    # (Redis lists every lane it knows, an empty one as (0, 0); in process only those with work)
    mem, red = pair.both(lambda s: {k: d for k, d in s.queue_depths().items() if d != (0, 0)})  # type: ignore[attr-defined]
    assert mem == red == {}
