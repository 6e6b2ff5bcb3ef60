"""Schedule arithmetic against a brute-force model (hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scheduler import schedules
from scheduler.model import Misfire

# Exact binary fractions keep the model's arithmetic exact too.
intervals = st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0, 7.5, 60.0])
anchors = st.integers(-1000, 1000).map(lambda i: i * 0.25)


@given(anchors, intervals, st.integers(0, 10_000))
def test_occurrence_k_is_anchor_plus_k_intervals_exactly(anchor, interval, k):
    assert schedules.occurrence(anchor, interval, k) == anchor + k * interval


@given(anchors, intervals, st.integers(-4000, 40_000).map(lambda i: i * 0.125))
def test_index_helpers_agree_with_a_linear_scan(anchor, interval, now):
    grid = [anchor + k * interval for k in range(3000)]
    last = max((k for k, t in enumerate(grid) if t <= now), default=-1)
    first = min((k for k, t in enumerate(grid) if t >= now), default=None)
    if grid[-1] > now:  # inside the scanned range
        assert schedules.last_index_at_or_before(anchor, interval, now) == last
        assert schedules.first_index_at_or_after(anchor, interval, now) == first


def model(anchor, interval, k, now, policy, grace):
    """Brute force: list the due occurrences, then apply the policy's words."""
    due = [j for j in range(k, k + 100_000) if anchor + j * interval <= now]
    missed = [j for j in due if now - (anchor + j * interval) > grace]
    on_time = [j for j in due if j not in missed]
    if policy is Misfire.CATCH_UP or k not in missed:
        return k, k + 1, []
    if policy is Misfire.RUN_ONCE:
        return due[-1], due[-1] + 1, due[:-1]
    if on_time:
        return on_time[0], on_time[0] + 1, [j for j in missed if j < on_time[0]]
    return None, due[-1] + 1, due


@given(
    anchors,
    intervals,
    st.integers(0, 50),
    st.integers(0, 4000).map(lambda i: i * 0.125),
    st.sampled_from(list(Misfire)),
    st.sampled_from([0.0, 0.25, 1.0, 5.0, 60.0]),
)
def test_plan_matches_the_model(anchor, interval, k, later, policy, grace):
    now = anchor + k * interval + later  # occurrence k is due
    plan = schedules.plan(anchor, interval, k, now, policy, grace)
    run, next_k, skipped = model(anchor, interval, k, now, policy, grace)
    assert (plan.run, plan.next_k) == (run, next_k)
    got = [] if plan.skipped is None else list(range(plan.skipped[0], plan.skipped[1] + 1))
    assert got == skipped
    # nothing is ever run early, and the next occurrence is in the future or catch-up
    if plan.run is not None:
        assert anchor + plan.run * interval <= now
    if policy is not Misfire.CATCH_UP:
        assert anchor + plan.next_k * interval > now - grace


def test_default_grace_is_one_interval_capped_at_a_minute():
    assert schedules.grace_for(0.2, None) == 0.2
    assert schedules.grace_for(3600, None) == 60
    assert schedules.grace_for(3600, 5) == 5
