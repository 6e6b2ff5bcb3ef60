"""The store contract: every store implementation must pass this suite.

Driven directly (no dispatcher, no threads) with a fake clock, so every instant is exact:
the due instant itself, one tick before it, the lease deadline itself.
"""

from __future__ import annotations

import threading

import pytest

from scheduler.model import After, Commit, Delivery, Every, Misfire, Overlap, RetryPolicy
from tests.conftest import START
from tests.helpers import every, spec

ALL = {"default": 100}


def claim(store, capacity=None, lease=None):
    return store.claim_due(capacity or ALL, lease, "owner-1")


def ids(batch):
    return [c.job_id for c in batch.claims]


# ---- due time ------------------------------------------------------------------------


def test_not_claimable_before_due_and_claimable_at_the_exact_instant(store, clock):
    store.add(spec("a", After(5)))
    clock.advance(4.999)
    batch = claim(store)
    assert batch.claims == []
    assert batch.next_due_in == pytest.approx(0.001)
    clock.advance(0.001)
    batch = claim(store)
    assert ids(batch) == ["a"]
    assert batch.claims[0].scheduled == START + 5
    assert batch.claims[0].attempt == 1


def test_equal_due_times_are_claimed_in_submission_order(store, clock):
    for name in "dcbaefg":
        store.add(spec(name, After(1)))
    clock.advance(1)
    assert ids(claim(store)) == list("dcbaefg")


def test_earlier_due_first_regardless_of_submission(store, clock):
    store.add(spec("late", After(3)))
    store.add(spec("early", After(1)))
    store.add(spec("mid", After(2)))
    clock.advance(3)
    assert ids(claim(store)) == ["early", "mid", "late"]


def test_claims_are_bounded_by_capacity_and_report_more_due(store, clock):
    for i in range(5):
        store.add(spec(f"j{i}", After(0)))
    batch = claim(store, {"default": 2})
    assert ids(batch) == ["j0", "j1"]
    assert batch.next_due_in is None  # the only lane is full: nothing to wait for
    batch = claim(store, {"default": 10})
    assert ids(batch) == ["j2", "j3", "j4"]


def test_lanes_are_served_only_with_capacity(store, clock):
    store.add(spec("slow", After(0), lane="slow"))
    store.add(spec("fast", After(0), lane="fast"))
    assert ids(claim(store, {"fast": 1, "slow": 0})) == ["fast"]
    assert ids(claim(store, {"default": 5})) == []
    assert ids(claim(store, {"slow": 1})) == ["slow"]


def test_fences_strictly_increase(store, clock):
    for i in range(4):
        store.add(spec(f"j{i}", After(0)))
    fences = [c.fence for c in claim(store).claims]
    assert fences == sorted(fences) and len(set(fences)) == 4


def test_next_id_is_unique_and_increasing(store):
    got = [store.next_id() for _ in range(5)]
    assert got == sorted(got) and len(set(got)) == 5


def test_add_wakes_subscribers_with_due_in(store, clock):
    seen: list = []
    cond = threading.Condition()

    def listener(due_in):
        with cond:
            seen.append(due_in)
            cond.notify_all()

    unsubscribe = store.subscribe(listener)  # returns once wake-ups are being delivered
    store.add(spec("a", After(2.5)))
    with cond:  # a shared store delivers wake-ups from another thread
        assert cond.wait_for(lambda: any(x == pytest.approx(2.5) for x in seen), 5)
    unsubscribe()
    count = len(seen)
    store.add(spec("b", After(1)))
    assert len(seen) == count
    assert all(x is None or x <= 2.5 + 1e-9 for x in seen)  # never later than the job


# ---- cancel ----------------------------------------------------------------------------


def test_cancel_pending_prevents_the_start(store, clock):
    store.add(spec("a", After(1)))
    assert store.cancel("a") is True
    clock.advance(1)
    assert claim(store).claims == []
    assert store.cancel("a") is False
    assert store.get("a").state == "cancelled"


def test_cancel_unknown_is_false(store):
    assert store.cancel("nope") is False


def test_cancel_of_a_running_one_off_is_false_and_it_may_complete(store, clock):
    store.add(spec("a", After(0)))
    (c,) = claim(store).claims
    assert store.cancel("a") is False
    assert store.complete(c, "done") is Commit.OK
    assert store.get("a").runs == 1


def test_cancel_of_recurring_job_while_running_stops_the_series(store, clock):
    store.add(every("r", 1))
    clock.advance(1)
    (c,) = claim(store).claims
    assert store.cancel("r") is True
    clock.advance(10)
    assert claim(store).claims == []
    assert store.complete(c, None) is Commit.OK
    assert store.get("r").state == "cancelled"


def test_an_invocation_an_operator_interrupted_ends_without_a_failure(store, clock):
    """``end_interrupted``: ``cancel(interrupt=True)`` cancelled the job, then its running
    invocation stopped. No retry (though its policy allows one), no dead letter, no
    failure counted, no success; one ``interrupted`` event; the job reads as cancelled.
    Token-checked, and a resend answers OK and records nothing twice."""
    store.add(spec("a", After(1), retry=RetryPolicy(max_attempts=3)))
    store.add(every("r", 1))
    clock.advance(1)
    by_id = {c.job_id: c for c in claim(store, lease=10).claims}
    a, r = by_id["a"], by_id["r"]
    assert store.cancel("a") is False and store.cancel("r") is True
    forged = a._replace(token=a.token + "x")
    assert store.end_interrupted(forged, "x") is Commit.LEASE_LOST
    assert store.end_interrupted(a, "interrupted by cancel(interrupt=True)") is Commit.OK
    assert store.end_interrupted(a, "again") is Commit.OK  # a resend
    assert store.end_interrupted(r, "stopped") is Commit.OK
    clock.advance(60)
    assert claim(store, lease=10).claims == []  # nothing retried, nothing left to run
    for job in "ar":
        info = store.get(job)
        assert (info.state, info.runs, info.failures) == ("cancelled", 0, 0), info
        assert info.last_error is None and info.last_result is None, info
        assert info.dead_letters == () and info.running == (), info
    events = store.events(100)
    assert not {"failed", "dead_lettered", "retried", "succeeded"} & {e.kind for e in events}
    assert [
        (e.job_id, e.scheduled, e.attempt, e.detail) for e in events if e.kind == "interrupted"
    ] == [
        ("a", a.scheduled, 1, "interrupted by cancel(interrupt=True)"),
        ("r", r.scheduled, 1, "stopped"),
    ]


def test_an_interrupted_invocation_keeps_the_last_error_of_an_earlier_failure(store, clock):
    store.add(every("r", 1))
    clock.advance(1)
    (c,) = claim(store).claims
    assert store.fail(c, "ValueError: boom", None) is Commit.OK
    clock.advance(1)
    (c,) = claim(store).claims
    store.cancel("r")
    assert store.end_interrupted(c, "stopped") is Commit.OK
    info = store.get("r")
    assert (info.state, info.failures, info.last_error) == ("cancelled", 1, "ValueError: boom")
    assert len(info.dead_letters) == 1  # the failure's, not the interrupt's


# ---- recurring ------------------------------------------------------------------------


def test_fixed_rate_grid_ignores_dispatch_lateness(store, clock):
    store.add(every("r", 10, misfire=Misfire.CATCH_UP))
    got = []
    for late in (0.0, 3.0, 9.9, 0.5):
        clock.advance(10 - (clock.now() - START) % 10 if (clock.now() - START) % 10 else 10)
        clock.advance(late)
        (c,) = claim(store).claims
        store.complete(c, None)
        got.append(c.scheduled - START)
        clock.advance(-0.0)
    assert got == [10, 20, 30, 40]


def test_first_run_is_one_interval_after_scheduling_by_default(store, clock):
    store.add(every("r", 2))
    clock.advance(1.999)
    assert claim(store).claims == []
    clock.advance(0.001)
    assert [c.scheduled for c in claim(store).claims] == [START + 2]


def test_explicit_anchor_sets_the_phase(store, clock):
    # anchor in the past at wall START - 0.5, interval 2: grid ..., START+1.5, START+3.5
    store.add(spec("r", Every(2, anchor=START - 0.5)))
    clock.advance(1.5)
    assert [c.scheduled for c in claim(store).claims] == [START + 1.5]


def test_upsert_same_definition_keeps_anchor(store, clock):
    s = every("r", 10)
    assert store.add(s).outcome == "created"
    clock.advance(6)
    assert store.add(s).outcome == "unchanged"
    clock.advance(4)
    assert [c.scheduled for c in claim(store).claims] == [START + 10]


def test_upsert_changed_definition_replaces_and_old_occurrence_never_runs(store, clock):
    store.add(every("r", 10))
    clock.advance(6)
    assert store.add(every("r", 7)).outcome == "replaced"
    clock.advance(4)  # the old occurrence at START+10 is gone
    assert claim(store).claims == []
    clock.advance(3)
    assert [c.scheduled for c in claim(store).claims] == [START + 13]


def test_replaced_job_old_running_invocation_may_finish(store, clock):
    store.add(every("r", 1))
    clock.advance(1)
    (old,) = claim(store).claims
    store.add(every("r", 5))
    assert store.complete(old, None) is Commit.OK
    clock.advance(5)
    (new,) = claim(store).claims
    assert new.scheduled == START + 6 and new.generation != old.generation


# ---- misfire -------------------------------------------------------------------------


def _run_all(store, clock, steps):
    out = []
    for _ in range(steps):
        batch = claim(store)
        for c in batch.claims:
            out.append(round(c.scheduled - START, 6))
            store.complete(c, None)
    return out


def test_misfire_skip_records_missed_and_waits_for_next_grid_point(store, clock):
    store.add(every("r", 1, misfire=Misfire.SKIP))
    clock.advance(5.5)  # 1..5 missed (late by more than the 1 s grace)
    assert _run_all(store, clock, 3) == [5]  # 5 is late by 0.5 <= grace: runs
    info = store.get("r")
    assert [(s.count, s.reason) for s in info.skipped] == [(4, "misfire")]
    assert info.next_run == START + 6


def test_misfire_skip_with_nothing_on_time_runs_nothing(store, clock):
    store.add(every("r", 10, misfire=Misfire.SKIP, misfire_grace=1))
    clock.advance(25)  # 10 and 20 both later than 1 s
    assert _run_all(store, clock, 2) == []
    assert store.get("r").next_run == START + 30
    assert store.get("r").skipped[0].count == 2


def test_misfire_run_once_coalesces(store, clock):
    store.add(every("r", 1, misfire=Misfire.RUN_ONCE))
    clock.advance(5.5)
    assert _run_all(store, clock, 3) == [5]
    assert [(s.count, s.reason) for s in store.get("r").skipped] == [(4, "coalesced")]


def test_misfire_catch_up_runs_each(store, clock):
    store.add(every("r", 1, misfire=Misfire.CATCH_UP))
    clock.advance(5.5)
    assert _run_all(store, clock, 6) == [1, 2, 3, 4, 5]
    assert store.get("r").skipped == ()


# ---- overlap ---------------------------------------------------------------------------


def test_overlap_skip_is_default_and_recorded(store, clock):
    store.add(every("r", 1))
    clock.advance(1)
    (c1,) = claim(store).claims
    clock.advance(1)
    assert claim(store).claims == []
    assert [(s.first - START, s.reason) for s in store.get("r").skipped] == [(2, "overlap")]
    store.complete(c1, None)
    clock.advance(1)
    assert [c.scheduled - START for c in claim(store).claims] == [3]


def test_overlap_allow_runs_concurrently(store, clock):
    store.add(every("r", 1, overlap=Overlap.ALLOW))
    clock.advance(1)
    claim(store)
    clock.advance(1)
    assert [c.scheduled - START for c in claim(store).claims] == [2]


def test_overlap_queue_holds_one_until_the_running_one_ends(store, clock):
    store.add(every("r", 1, overlap=Overlap.QUEUE))
    clock.advance(1)
    (c1,) = claim(store).claims
    clock.advance(1)
    assert claim(store).claims == []  # 2 is queued
    clock.advance(1)
    assert claim(store).claims == []  # 3: queue full, skipped
    store.complete(c1, None)
    assert [c.scheduled - START for c in claim(store).claims] == [2]
    assert [(s.first - START, s.reason) for s in store.get("r").skipped] == [
        (3, "overlap-queue-full")
    ]


# ---- leases, tokens, retries ---------------------------------------------------------


def test_lease_renew_before_deadline_and_lost_at_the_exact_deadline(store, clock):
    store.add(spec("a", After(0)))
    (c,) = claim(store, lease=10).claims
    clock.advance(9.999)
    assert store.renew([c], 10) == [Commit.OK]  # now deadline = +19.999
    clock.advance(10)
    assert store.complete(c, None) is Commit.LEASE_LOST  # exactly at the deadline


def test_expired_lease_is_reclaimed_with_attempt_2_and_higher_fence(store, clock):
    store.add(spec("a", After(0)))
    (c1,) = claim(store, lease=5).claims
    clock.advance(4.999)
    assert claim(store, lease=5).claims == []
    clock.advance(0.001)
    (c2,) = claim(store, lease=5).claims
    assert (c2.job_id, c2.scheduled, c2.attempt) == ("a", c1.scheduled, 2)
    assert c2.fence > c1.fence and c2.token != c1.token
    assert store.complete(c1, None) is Commit.LEASE_LOST  # the stale owner
    assert store.complete(c2, None) is Commit.OK
    assert store.get("a").runs == 1


def test_next_due_in_includes_the_next_lease_expiry(store, clock):
    store.add(spec("a", After(0)))
    claim(store, lease=7)
    assert claim(store, lease=7).next_due_in == pytest.approx(7)


def test_at_most_once_lease_loss_is_abandoned_not_rerun(store, clock):
    store.add(spec("a", After(0), delivery=Delivery.AT_MOST_ONCE))
    claim(store, lease=1)
    clock.advance(1)
    assert claim(store, lease=1).claims == []
    assert store.get("a").state == "abandoned"
    assert [e.kind for e in store.events() if e.kind in ("lease_lost", "abandoned")] == [
        "lease_lost",
        "abandoned",
    ]


def test_poison_invocation_is_dead_lettered_after_max_stalls(store, clock):
    store.add(spec("a", After(0), retry=RetryPolicy(max_stalls=2)))
    claim(store, lease=1)
    clock.advance(1)
    assert [c.attempt for c in claim(store, lease=1).claims] == [2]
    clock.advance(1)
    assert claim(store, lease=1).claims == []
    info = store.get("a")
    assert [e.detail for e in info.dead_letters] == ["lease lost"]


def test_wrong_token_cannot_write(store, clock):
    store.add(spec("a", After(0)))
    (c,) = claim(store, lease=10).claims
    forged = c._replace(token=c.token + "x")
    assert store.complete(forged, None) is Commit.LEASE_LOST
    assert store.fail(forged, "x", None) is Commit.LEASE_LOST
    assert store.release(forged) is Commit.LEASE_LOST
    assert store.renew([forged], 10) == [Commit.LEASE_LOST]
    assert store.complete(c, None) is Commit.OK
    assert store.complete(c, None) is Commit.OK  # a resend answers the same...
    assert store.get("a").runs == 1  # ...and records nothing twice


def test_complete_many_records_each_item_as_complete_would(store, clock):
    """Every store records successes in batches (``BatchAcks``): one outcome per item, in
    order, each token-checked; a resent item answers OK and records nothing twice."""
    from scheduler.stores.base import BatchAcks

    assert isinstance(store, BatchAcks)
    for j in "abc":
        store.add(spec(j, After(0)))
    by_id = {cl.job_id: cl for cl in claim(store, lease=10).claims}
    a, b, c = (by_id[j] for j in "abc")  # a sharded store answers in shard order
    forged = b._replace(token=b.token + "x")
    assert store.complete_many([(a, 1), (forged, 2), (c, 3)]) == [
        Commit.OK,
        Commit.LEASE_LOST,
        Commit.OK,
    ]
    assert store.complete_many([(a, 1), (b, 2)]) == [Commit.OK, Commit.OK]  # a resent a
    assert [store.get(j).runs for j in "abc"] == [1, 1, 1]
    assert [store.get(j).last_result for j in "abc"] == [1, 2, 3]
    assert [e.kind for e in store.events(100)].count("succeeded") == 3


def test_acks_sent_with_a_claim_are_recorded_first(store, clock):
    """A store that takes acks with a claim (``AcksWithClaims``) records them before it
    claims: a queued occurrence whose running one just ended is claimed in the same
    call. Each ack is token-checked as ``complete_many`` would; ``None`` (a sharded
    store: not sent, its shard was not visited) leaves it for ``complete_many``."""
    from scheduler.stores.base import AcksWithClaims

    if not isinstance(store, AcksWithClaims):
        pytest.skip("the store records acks on their own (in process: no round trip)")
    store.add(every("r", 1, overlap=Overlap.QUEUE))
    store.add(spec("a", After(0)))
    clock.advance(1)
    by_id = {c.job_id: c for c in claim(store, lease=10).claims}
    clock.advance(1)
    assert claim(store, lease=10).claims == []  # r's occurrence 2 waits for 1 to end
    r1, a = by_id["r"], by_id["a"]
    forged = a._replace(token=a.token + "x")
    # scripts loaded (a server's first call of a script answers NOSCRIPT: the claim after
    # it has run by then, so in that one call the acks are recorded after it)
    assert store.complete_many([(forged, 0)]) == [Commit.LEASE_LOST]
    out = store.complete_and_claim([(r1, 1), (forged, 2)], ALL, 10.0, "owner-1")
    assert out.error is None and out.batch is not None
    assert out.acks[1] in (Commit.LEASE_LOST, None)
    if out.acks[0] is None:  # not sent with this claim (another shard)
        assert store.complete_many([(r1, 1)]) == [Commit.OK]
        out = store.complete_and_claim([], ALL, 10.0, "owner-1")
        assert out.batch is not None
    assert [c.scheduled - START for c in out.batch.claims] == [2]  # acks went first
    done = [(r1, 1), (a, 3)]
    again = store.complete_and_claim(done, ALL, 10.0, "owner-1")
    assert all(x in (Commit.OK, None) for x in again.acks)  # r1's resent ack: ok again
    left = [d for d, x in zip(done, again.acks, strict=True) if x is None]
    assert store.complete_many(left) == [Commit.OK] * len(left)
    assert store.get("a").runs == 1 and store.get("a").last_result == 3
    assert [e.kind for e in store.events(100)].count("succeeded") == 2


def test_unknown_job_is_not_found(store, clock):
    store.add(spec("a", After(0)))
    (c,) = claim(store).claims
    ghost = c._replace(job_id="ghost", token="nope")
    assert store.complete(ghost, None) is Commit.NOT_FOUND


def test_fail_with_retry_requeues_attempt_2_after_the_delay(store, clock):
    store.add(spec("a", After(0)))
    (c,) = claim(store).claims
    assert store.fail(c, "boom", 3.0) is Commit.OK
    clock.advance(2.999)
    assert claim(store).claims == []
    clock.advance(0.001)
    (c2,) = claim(store).claims
    assert (c2.attempt, c2.scheduled) == (2, c.scheduled)


def test_final_failure_is_dead_lettered(store, clock):
    store.add(spec("a", After(0)))
    (c,) = claim(store).claims
    assert store.fail(c, "ValueError: boom", None) is Commit.OK
    info = store.get("a")
    assert (info.state, info.failures, info.last_error) == ("failed", 1, "ValueError: boom")
    assert [e.kind for e in info.dead_letters] == ["dead_lettered"]


def test_a_failure_keeps_the_end_of_its_traceback_beside_the_error(store, clock):
    store.add(spec("a", After(0)))
    (c,) = claim(store).claims
    tb = "Traceback (most recent call last):\n" + "  frame\n" * 2000 + "ValueError: boom\n"
    assert store.fail(c, "ValueError: boom", None, tb) is Commit.OK
    kept = store.get("a").last_traceback
    assert kept is not None and kept.endswith("ValueError: boom\n")
    assert len(kept.encode()) == 8192 and tb.endswith(kept)
    store.add(spec("b", After(0)))
    (c,) = claim(store).claims
    assert store.fail(c, "plain", None) is Commit.OK
    assert store.get("b").last_traceback is None


def test_recurring_job_keeps_its_schedule_through_failures(store, clock):
    store.add(every("r", 1))
    clock.advance(1)
    (c,) = claim(store).claims
    store.fail(c, "boom", None)
    clock.advance(1)
    assert [x.scheduled - START for x in claim(store).claims] == [2]


def test_release_returns_the_invocation_at_once_with_the_same_attempt(store, clock):
    store.add(spec("a", After(0)))
    (c,) = claim(store, lease=30).claims
    assert store.release(c) is Commit.OK
    (c2,) = claim(store, lease=30).claims
    assert (c2.attempt, c2.scheduled) == (1, c.scheduled)


# ---- pause / resume / inspection -------------------------------------------------------


def test_pause_hides_and_resume_restores(store, clock):
    store.add(spec("a", After(1)))
    assert store.pause("a") is True
    assert store.pause("a") is False
    clock.advance(5)
    assert claim(store).claims == []
    assert store.get("a").state == "paused"
    assert store.resume("a") is True
    assert ids(claim(store)) == ["a"]


def test_resume_applies_the_misfire_policy(store, clock):
    store.add(every("r", 1))
    store.pause("r")
    clock.advance(10.2)
    store.resume("r")
    assert _run_all(store, clock, 2) == [10]
    assert store.get("r").skipped[0].count == 9


def test_inspection_reports_running_and_next_run(store, clock):
    store.add(every("r", 2, overlap=Overlap.ALLOW))
    clock.advance(2)
    (c,) = claim(store, lease=10).claims
    info = store.get("r")
    assert info.state == "running"
    assert info.next_run == START + 4
    assert [(r.scheduled, r.attempt, r.fence) for r in info.running] == [(c.scheduled, 1, c.fence)]
    assert [j.job_id for j in store.jobs()] == ["r"]


def test_catch_up_never_skips_it_runs_missed_occurrences_one_after_another(store, clock):
    store.add(every("r", 1, misfire=Misfire.CATCH_UP))
    clock.advance(3.5)
    (c1,) = claim(store).claims  # 1 runs; 2 is parked behind it
    assert claim(store).claims == []
    store.complete(c1, None)
    assert _run_all(store, clock, 3) == [2, 3]
    assert store.get("r").skipped == ()


def test_trigger_runs_a_live_job_now_without_moving_its_schedule(store, clock):
    store.add(every("r", 10))
    clock.advance(3)
    assert store.trigger("r") is True
    (c,) = claim(store).claims
    assert (c.scheduled, c.attempt) == (START + 3, 1)
    store.complete(c, None)
    assert store.get("r").next_run == START + 10  # the grid is unchanged
    assert [e.kind for e in store.events() if e.kind == "triggered"] == ["triggered"]
    assert store.trigger("unknown") is False
    store.cancel("r")
    assert store.trigger("r") is False


def test_trigger_brings_a_one_off_forward_it_never_runs_twice(store, clock):
    """A one-off triggered ran now and again at its time ("once" broken); now its pending
    run is brought forward. Paused, running or waiting for a retry: nothing to bring
    forward."""
    store.add(spec("once", After(3600)))
    clock.advance(3)
    assert store.trigger("once") is True
    (c,) = claim(store).claims
    assert (c.job_id, c.scheduled, c.attempt) == ("once", START + 3, 1)
    assert store.trigger("once") is False  # running: its one run is under way
    store.complete(c, None)
    clock.advance(3600)
    assert claim(store).claims == [] and store.get("once").state == "succeeded"
    assert store.trigger("once") is False  # finished
    store.add(spec("paused", After(3600)))
    assert store.pause("paused") and store.trigger("paused") is False
    assert store.resume("paused") and store.trigger("paused") is True
    store.add(spec("twice", After(3600)))
    assert store.trigger("twice") and store.trigger("twice")  # brought forward twice: one run
    assert sorted(c.job_id for c in claim(store).claims) == ["paused", "twice"]
    clock.advance(3600)
    assert claim(store).claims == []
    details = [e.detail for e in store.events() if e.kind == "triggered"]
    assert details == ["brought forward"] * 4


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_a_one_off_paused_while_it_runs_ends_with_its_run(store, clock, outcome):
    """Found by a stranger's fleet audit: a one-off paused while its only run was under
    way never retired (it stayed "paused" after it succeeded), and over Redis a resume
    let the reconciler queue it again: it ran twice, attempt 1 both times."""
    store.add(spec("once", After(0)))
    (c,) = claim(store).claims
    assert store.pause("once")
    if outcome == "succeeded":
        store.complete(c, "done")
    else:
        store.fail(c, "RuntimeError: boom", None)
    info = store.get("once")
    assert info.state == outcome and info.runs + info.failures == 1, info
    assert store.resume("once") is False  # nothing to resume: it ended
    if hasattr(store, "reconcile"):
        assert store.reconcile().findings == ()  # nothing to requeue
    clock.advance(60)
    assert claim(store).claims == []


def test_enqueue_many_stores_all_or_refuses_before_writing(store, clock):
    from scheduler import Client

    client = Client(store)
    ids = client.enqueue_many(
        [
            {"task": "tests.noop", "delay": 1},
            {"task": "tests.noop", "every": 5, "job_id": "rec"},
            {"task": "tests.noop", "at": START + 2, "kwargs": {"x": 1}},
        ]
    )
    assert ids[1] == "rec" and len(set(ids)) == 3
    assert sorted(j.job_id for j in store.jobs()) == sorted(ids)
    with pytest.raises(ValueError):
        client.enqueue_many(
            [
                {"task": "tests.noop", "delay": 1, "job_id": "fresh"},
                {"task": "tests.noop", "delay": -1},
            ]
        )
    assert store.get("fresh") is None  # validated before anything was written
    clock.advance(2)
    assert sorted(c.job_id for c in claim(store).claims) == sorted([ids[0], ids[2]])
