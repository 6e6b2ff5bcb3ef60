"""The checker itself, on crafted histories: each invariant it claims to check must be
able to fail (a checker that always passes proves nothing)."""

from __future__ import annotations

from tests.faults.checker import Fault, History, check

OWNER_A, OWNER_B = "host-101-aaaaaa", "host-202-bbbbbb"


def ev(kind, at, attempt=1, job="j", sched=1000, detail=""):
    return {
        "kind": kind,
        "job": job,
        "sched": sched,
        "attempt": attempt,
        "detail": detail,
        "at": at,
    }


def ex(attempt, pid, start, fence, job="j", sched=1000):
    return {
        "job": job,
        "sched": sched,
        "attempt": attempt,
        "fence": fence,
        "pid": pid,
        "start_ms": start,
    }


def hist(events, execs, faults=(), **kw):
    return History(
        events=events,
        execs=execs,
        expected=kw.pop("expected", {"j"}),
        lease_ms=1000,
        faults=list(faults),
        **kw,
    )


CLEAN = [ev("claimed", 1010, detail=OWNER_A), ev("succeeded", 1100)]


def test_a_clean_history_passes():
    rep = check(hist(CLEAN, [ex(1, 101, 1020, 1)]))
    assert rep.ok, rep.summary()
    assert (rep.invocations, rep.executions, rep.lost) == (1, 1, 0)
    assert rep.lateness_ms == [10]


def test_a_lost_invocation_is_reported():
    rep = check(hist([ev("claimed", 1010, detail=OWNER_A)], [ex(1, 101, 1020, 1)]))
    assert rep.lost == 1
    assert any(v.startswith("I4 j:") for v in rep.violations), rep.violations


def test_a_second_commit_is_a_violation():
    rep = check(hist(CLEAN + [ev("succeeded", 1200)], [ex(1, 101, 1020, 1)]))
    assert rep.duplicate_commits == 1
    assert any("I3" in v for v in rep.violations)


def test_two_live_claims_violate_i2():
    events = [
        ev("claimed", 1010, detail=OWNER_A),
        ev("claimed", 1020, 2, detail=OWNER_B),
        ev("succeeded", 1100, 2),
    ]
    assert any(v.startswith("I2") for v in check(hist(events, [])).violations)


def test_a_commit_by_a_superseded_attempt_violates_i3():
    events = [
        ev("claimed", 1010, detail=OWNER_A),
        ev("lease_lost", 2100),
        ev("claimed", 2110, 2, detail=OWNER_B),
        ev("succeeded", 2200, 1),
    ]
    assert any(v.startswith("I3") for v in check(hist(events, [])).violations)


def test_attempt_one_twice_without_a_release_violates_i1():
    events = [
        ev("claimed", 1010, detail=OWNER_A),
        ev("lease_lost", 2100),
        ev("claimed", 2110, 1, detail=OWNER_B),
        ev("succeeded", 2200, 1),
    ]
    assert any(v.startswith("I1") for v in check(hist(events, [])).violations)
    released = [
        ev("claimed", 1010, detail=OWNER_A),
        ev("released", 1020),
        ev("claimed", 1030, 1, detail=OWNER_B),
        ev("succeeded", 1100, 1),
    ]
    assert check(hist(released, [])).ok


def test_a_rerun_needs_a_fault_to_explain_it():
    events = [
        ev("claimed", 1010, detail=OWNER_A),
        ev("lease_lost", 2100),
        ev("claimed", 2110, 2, detail=OWNER_B),
        ev("succeeded", 2200, 2),
    ]
    execs = [ex(1, 101, 1020, 1), ex(2, 202, 2120, 2)]
    rep = check(hist(events, execs))
    assert any(v.startswith("I6") for v in rep.violations), rep.violations
    assert rep.duplicates == {"unexplained": 1}
    killed = check(hist(events, execs, [Fault("kill", 1500, pid=101)]))
    assert killed.ok, killed.summary()
    assert killed.duplicates == {"owner death": 1}
    assert killed.recovery_ms == [600] and killed.reclaim_ms == [610]
    paused = check(hist(events, execs, [Fault("stop", 1500, 4500, pid=101)]))
    assert paused.duplicates == {"pause past the lease": 1}
    other = check(hist(events, execs, [Fault("kill", 1500, pid=999)]))  # not the owner
    assert not other.ok


def test_a_claim_round_that_skips_an_expired_lease_violates_i5():
    """I5 is an order of events: owner 101 died at 1500, so its lease had ended by 3500
    (lease 1000 + slack 1000); a round that claimed k at 4000 and left j held skipped an
    expired lease. A late take-back with no round in between is only a figure."""
    slow = [
        ev("claimed", 1010, detail=OWNER_A),
        ev("lease_lost", 9000),
        ev("claimed", 9010, 2, detail=OWNER_B),
        ev("succeeded", 9100, 2),
    ]
    kill = Fault("kill", 1500, pid=101)
    rep = check(hist(slow, [], [kill]))
    assert rep.ok, rep.summary()  # the survivors claimed nothing until 9000: late, not wrong
    assert rep.recovery_ms == [7500]
    skipped = slow[:1] + [ev("claimed", 4000, job="k", detail=OWNER_B)] + slow[1:]
    rep = check(hist(skipped, [], [kill], expected={"j", "k"}, drained=False))
    assert any("I5" in v and "claim round ran at 4000" in v for v in rep.violations), rep.violations
    # a round before the lease could have ended (3500) had nothing to take back
    early = slow[:1] + [ev("claimed", 3400, job="k", detail=OWNER_B)] + slow[1:]
    assert not any("I5" in v for v in check(hist(early, [], [kill], drained=False)).violations)
    # the round that takes it back claims in the same script, after the reap: not a skip
    same = slow[:2] + [ev("claimed", 9000, job="k", detail=OWNER_B)] + slow[2:]
    assert not any("I5" in v for v in check(hist(same, [], [kill], drained=False)).violations)


def test_one_claim_executed_twice_is_a_violation():
    rep = check(hist(CLEAN, [ex(1, 101, 1020, 7), ex(1, 101, 1030, 7)]))
    assert any("fence 7" in v for v in rep.violations)


def test_recurrence_off_grid_or_with_a_silent_gap_violates_i7():
    def run(scheds, skipped=()):
        events = []
        for s in scheds:
            events += [
                ev("claimed", s + 5, job="r", sched=s, detail=OWNER_A),
                ev("succeeded", s + 9, job="r", sched=s),
            ]
        events += [ev("skipped", s + 1, None, job="r", sched=s) for s in skipped]
        return check(
            History(
                events=events,
                execs=[],
                expected=set(),
                lease_ms=1000,
                recurring={"r": 100},
            )
        )

    assert run([0, 100, 200]).ok
    assert any("off the" in v for v in run([0, 100, 250]).violations)
    assert any("neither ran" in v for v in run([0, 100, 400]).violations)
    assert run([0, 100, 400], skipped=[200]).ok


def test_data_loss_turns_loss_into_a_report_not_a_violation():
    events = [ev("claimed", 1010, detail=OWNER_A)]
    rep = check(hist(events, [ex(1, 101, 1020, 1)], [Fault("data_loss", 1500)], drained=False))
    assert rep.lost == 1 and rep.ok


def test_a_retry_after_a_recorded_failure_is_not_a_duplicate():
    events = [
        ev("claimed", 1010, detail=OWNER_A),
        ev("retried", 1100),
        ev("claimed", 1200, 2, detail=OWNER_B),
        ev("succeeded", 1300, 2),
    ]
    rep = check(hist(events, [ex(1, 101, 1020, 1), ex(2, 202, 1210, 2)]))
    assert rep.ok and not rep.duplicates, rep.summary()


def test_events_the_recorder_missed_are_reported_first_as_its_own():
    rep = check(hist(CLEAN, [ex(1, 101, 1020, 1)], event_gaps=[("5-0", 190)]))
    assert rep.violations[0].startswith("recorder: 190 stream entries were trimmed"), rep
    assert "after 5-0" in rep.violations[0] and len(rep.violations) == 1, rep
