"""Flow control, the same in both stores (docs/flow-control.md): priorities among due jobs,
limit keys taking turns, concurrency and rate limits per key, enforced at claim time.

Each test drives a ``MemoryStore`` and a ``RedisStore`` (fakeredis, and a real
``redis-server``) on one fake clock through the same steps, and asserts both the
semantics and that the two stores agree.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from scheduler import flow
from scheduler.flow import Limit
from scheduler.metrics import Metrics
from scheduler.model import After, Cron, Every, RetryPolicy
from tests.model.test_divergences import Pair, claim, claims, job
from workers.runner import Runner, Work
from workers.timers import Timers


def add(p: Pair, job_id: str, delay: float = 0, **kw: Any) -> None:
    p.both(lambda s: s.add(job(job_id, After(delay), **kw)))


def ids(p: Pair, capacity: int = 10, lease: float = 30) -> tuple[list[str], Any, Any]:
    """One claim on both stores: the job ids claimed (the same in both), and the batches."""
    m, r = claim(p, capacity=capacity, lease=lease)
    assert claims(m) == claims(r)
    if m.next_due_in is None or r.next_due_in is None:
        assert m.next_due_in is r.next_due_in
    else:
        assert m.next_due_in == pytest.approx(r.next_due_in, abs=0.0011)
    return [c.job_id for c in m.claims], m, r


def limit(p: Pair, scope: str, lim: Limit | None) -> None:
    assert p.mem.set_limit(scope, lim) == p.red.set_limit(scope, lim)  # type: ignore[attr-defined]


# ---- priorities -----------------------------------------------------------------------------


def test_a_higher_priority_starts_first_among_due_jobs(pair: Pair) -> None:
    add(pair, "low", priority=-3)
    add(pair, "plain")
    add(pair, "high", priority=5)
    pair.clock.advance(0.001)
    assert ids(pair, 1)[0] == ["high"]
    assert ids(pair, 1)[0] == ["plain"]
    assert ids(pair, 1)[0] == ["low"]


def test_priority_never_makes_a_job_early(pair: Pair) -> None:
    add(pair, "low", priority=-3)
    add(pair, "high", 5, priority=5)
    pair.clock.advance(0.001)
    got, m, _ = ids(pair, 2)
    assert got == ["low"]
    assert m.next_due_in == pytest.approx(4.999, abs=0.0011)


def test_fifo_within_a_priority(pair: Pair) -> None:
    add(pair, "b", 0.002, priority=2)
    add(pair, "a", 0.001, priority=2)
    add(pair, "c", 0.002, priority=2)
    pair.clock.advance(1)
    assert ids(pair)[0] == ["a", "b", "c"]


# ---- keys take turns ----------------------------------------------------------------------


def test_keys_take_turns(pair: Pair) -> None:
    """Key A has 20 due jobs, key B 3 due a moment later: they alternate, B is not stuck
    behind A's backlog."""
    for i in range(20):
        add(pair, f"a{i:02}", limit_key="A")
    pair.clock.advance(0.001)
    for i in range(3):
        add(pair, f"b{i}", limit_key="B")
    pair.clock.advance(0.001)
    got, _, _ = ids(pair, 4)
    assert got == ["a00", "b0", "a01", "b1"]
    pair.clock.advance(0.001)
    assert ids(pair, 4)[0] == ["a02", "b2", "a03", "a04"]


def test_jobs_without_a_key_take_turns_with_keyed_ones(pair: Pair) -> None:
    for i in range(5):
        add(pair, f"k{i}", limit_key="K")
    for i in range(5):
        add(pair, f"n{i}")
    pair.clock.advance(0.001)
    assert ids(pair, 4)[0] == ["n0", "k0", "n1", "k1"]


# ---- limits -------------------------------------------------------------------------------


def test_concurrency_per_key(pair: Pair) -> None:
    limit(pair, "tenant:1", flow.limit(concurrency=2))
    for i in range(5):
        add(pair, f"j{i}", limit_key="tenant:1")
    add(pair, "other", limit_key="tenant:2")
    pair.clock.advance(0.001)
    got, m, r = ids(pair)
    assert got == ["j0", "other", "j1"]
    assert ids(pair)[0] == []  # at its limit: none more, nothing early
    assert pair.mem.flow_of("tenant:1").running == pair.red.flow_of("tenant:1").running == 2  # type: ignore[attr-defined]
    first = m.claims[0], r.claims[0]
    assert pair.mem.complete(first[0], None) == pair.red.complete(first[1], None)
    assert ids(pair)[0] == ["j2"]  # a slot came back


def test_a_reaped_lease_gives_its_slot_back(pair: Pair) -> None:
    limit(pair, "k", flow.limit(concurrency=1))
    add(pair, "a", limit_key="k")
    add(pair, "b", limit_key="k")
    pair.clock.advance(0.001)
    assert ids(pair, lease=5)[0] == ["a"]
    pair.clock.advance(5)
    got, m, r = ids(pair, lease=5)  # a's lease expired: its slot came back; b was due first
    assert got == ["b"]
    assert pair.mem.complete(m.claims[0], None) == pair.red.complete(r.claims[0], None)
    got, m, _ = ids(pair, lease=5)
    assert got == ["a"] and m.claims[0].attempt == 2  # a's re-run, in the slot b freed


def test_rate_per_key(pair: Pair) -> None:
    limit(pair, "api:*", flow.limit(rate=2, per=1))
    for i in range(5):
        add(pair, f"j{i}", limit_key="api:x")
    pair.clock.advance(0.001)
    got, m, _ = ids(pair)
    assert got == ["j0", "j1"]
    # when the window lets one more: the period and the guard (a start follows its claim)
    assert m.next_due_in == pytest.approx(1 + flow.RATE_GUARD_MS / 1000, abs=0.0011)
    pair.clock.advance(1)
    assert ids(pair)[0] == []
    pair.clock.advance(flow.RATE_GUARD_MS / 1000)
    assert ids(pair)[0] == ["j2", "j3"]
    assert pair.mem.flow_of("api:x") == pair.red.flow_of("api:x")  # type: ignore[attr-defined]
    assert pair.mem.flow_of("api:x").recent_starts == 2  # type: ignore[attr-defined]


def test_a_claim_a_rate_counted_must_start_soon(pair: Pair) -> None:
    """Only a claim its key's rate counted carries a start deadline; handed back unstarted,
    it is pending again and its counted start stays in the window."""
    limit(pair, "api:x", flow.limit(rate=2, per=1))
    limit(pair, "db:y", flow.limit(concurrency=1))
    add(pair, "rated", limit_key="api:x")
    add(pair, "slot", limit_key="db:y")
    add(pair, "free", limit_key="other")
    add(pair, "plain")
    pair.clock.advance(0.001)
    got, m, r = ids(pair)
    for batch in (m, r):
        within = {c.job_id: c.start_within for c in batch.claims}
        assert within == {
            "rated": flow.RATE_START_WITHIN,
            "slot": None,
            "free": None,
            "plain": None,
        }
    rated = {s: next(c for c in b.claims if c.job_id == "rated") for s, b in (("m", m), ("r", r))}
    assert pair.mem.release(rated["m"]) == pair.red.release(rated["r"])
    assert pair.mem.flow_of("api:x") == pair.red.flow_of("api:x")  # type: ignore[attr-defined]
    assert pair.mem.flow_of("api:x").recent_starts == 1  # type: ignore[attr-defined]
    got, m, _ = ids(pair)
    assert got == ["rated"] and m.claims[0].attempt == 1  # the same attempt, one more start
    assert pair.mem.flow_of("api:x").recent_starts == 2  # type: ignore[attr-defined]


def test_a_loosened_limit_holds_from_the_next_claim(pair: Pair) -> None:
    limit(pair, "k", flow.limit(concurrency=1))
    for i in range(3):
        add(pair, f"j{i}", limit_key="k")
    pair.clock.advance(0.001)
    assert ids(pair)[0] == ["j0"]
    limit(pair, "k", flow.limit(concurrency=3))
    assert ids(pair)[0] == ["j1", "j2"]
    assert pair.mem.limits() == pair.red.limits() == {"k": Limit(None, None, 3)}  # type: ignore[attr-defined]
    limit(pair, "k", None)
    assert pair.mem.limits() == pair.red.limits() == {}  # type: ignore[attr-defined]


def test_readouts_name_the_lane_not_the_queue(pair: Pair) -> None:
    add(pair, "a", priority=3, limit_key="x", lane="other")
    mi, ri = pair.both(lambda s: s.get("a"))
    assert mi.lane == ri.lane == "other"


# ---- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, error",
    [
        ({"rate": 0, "per": 1}, ValueError),
        ({"rate": 5}, ValueError),
        ({"rate": 5, "per": math.nan}, ValueError),
        ({"rate": 5, "per": 10**9}, ValueError),
        ({"concurrency": -1}, ValueError),
        ({"concurrency": 1.5}, TypeError),
        ({"rate": True, "per": 1}, TypeError),
        ({}, ValueError),
    ],
)
def test_a_bad_limit_is_refused(kw: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        flow.limit(**kw)


@pytest.mark.parametrize("scope", ["", "a*b", "cust*", "x\n", "*" * 2, "a" * 201])
def test_a_bad_scope_writes_nothing(pair: Pair, scope: str) -> None:
    for store in (pair.mem, pair.red):
        with pytest.raises(ValueError):
            store.set_limit(scope, flow.limit(concurrency=1))  # type: ignore[attr-defined]
        assert store.limits() == {}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "kw", [{"priority": 11}, {"priority": "1"}, {"limit_key": "a*"}, {"limit_key": "a\tb"}]
)
def test_a_bad_priority_or_key_is_refused(kw: dict[str, Any]) -> None:
    from scheduler.specs import make_spec

    with pytest.raises((ValueError, TypeError)):
        make_spec("t.x", Every(1), check_task=False, **kw)


def test_a_key_alone_takes_what_its_limits_allow_in_one_claim(pair: Pair) -> None:
    limit(pair, "k", flow.limit(rate=3, per=1, concurrency=5))
    for i in range(8):
        add(pair, f"j{i}", limit_key="k")
    pair.clock.advance(0.001)
    assert ids(pair, 10)[0] == ["j0", "j1", "j2"]  # the rate's 3
    pair.clock.advance(1 + flow.RATE_GUARD_MS / 1000)
    assert ids(pair, 10)[0] == ["j3", "j4"]  # concurrency 5: 3 still run
    state = pair.mem.flow_of("k")  # type: ignore[attr-defined]
    assert state == pair.red.flow_of("k")  # type: ignore[attr-defined]
    assert (state.running, state.recent_starts) == (5, 2)


def test_readouts_count_jobs_where_they_wait(pair: Pair) -> None:
    """Lane depths count every queue of a lane (its own, each priority's, each key's)."""
    add(pair, "plain")
    add(pair, "high", priority=4)
    add(pair, "keyed", 5, limit_key="k")
    add(pair, "other", priority=-2, limit_key="k", lane="other")
    pair.clock.advance(0.001)
    m, r = pair.both(lambda s: s.queue_depths())  # type: ignore[attr-defined]
    assert m == r == {"default": (3, 2), "other": (1, 1)}


def test_a_cron_series_with_a_priority_back_from_a_gap(pair: Pair) -> None:
    """Its claim plans the series (Redis: a second script call claims the planned
    occurrence), through its priority's queue as through a lane's own. Found by the long
    differential run: the first call left its queue's turn ahead, the second claimed
    nothing."""
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"), priority=-1)))
    add(pair, "plain", 90_000)
    pair.clock.advance(3_700)
    got, _, _ = ids(pair)
    assert got == ["c"]


def test_a_planned_occurrence_behind_a_served_queue_in_one_claim(pair: Pair) -> None:
    """A one-off and a cron series back from a gap share a priority's queue: the claim
    takes the one-off, plans the series and (Redis: in a second script call) takes its
    occurrence too. Found by the long differential run: the served queue's turn (now +
    1 ms) hid it from the claim's second call."""
    add(pair, "a", priority=2)
    pair.both(lambda s: s.add(job("c", Cron("*/10 * * * * *"), priority=2)))
    pair.clock.advance(31)
    assert ids(pair, 2)[0] == ["a", "c"]


def test_a_planned_occurrence_takes_its_place_before_lower_priorities(pair: Pair) -> None:
    """A cron series of priority 2 back from a gap, and a re-run and a triggered run of
    priority 0, with room for 2: the series' planned occurrence takes the first place (as
    in process, where it is planned in place); over Redis the plan took no place, the two
    runs of priority 0 took both. Found by the long differential run."""
    pair.both(lambda s: s.add(job("e", Every(1))))
    pair.clock.advance(1)
    claim(pair, capacity=2)
    pair.both(lambda s: s.trigger("e"))
    pair.both(lambda s: s.add(job("c", Cron("*/10 * * * * *"), priority=2)))
    pair.clock.advance(31)
    assert ids(pair, 2)[0] == ["c", "e"]


def test_a_served_key_with_nothing_left_asks_for_nothing(pair: Pair) -> None:
    """A key's only job and a cron series back from a gap: after the claim the key's
    queue is empty, and nothing is due: the next claim is the lease's expiry, not now."""
    pair.both(lambda s: s.add(job("c", Cron("*/10 * * * * *"))))
    add(pair, "k", limit_key="k1")
    pair.clock.advance(31)
    got, m, _ = ids(pair, 3, lease=5)
    assert got == ["k", "c"] and m.next_due_in == pytest.approx(5)


def test_a_claims_later_call_leaves_a_keyed_queues_turn(pair: Pair) -> None:
    """A keyed series (every 1 s) and a cron series back from a gap in another lane: the
    keyed one's next occurrence is due at the claim (it waits for its run: overlap), and
    the claim's second script call (after the cron plan) re-judged its queue's turn to 1 s
    on; in process, one call, it stays due (the next claim records the overlap at once).
    Found by the long differential run."""
    pair.both(lambda s: s.add(job("e", Every(1), lane="other", limit_key="k1")))
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"))))
    pair.clock.advance(125)
    m, r = pair.both(lambda s: s.claim_due({"default": 2, "other": 2}, 5, "owner-1"))
    assert sorted(claims(m)) == sorted(claims(r))
    assert m.next_due_in == r.next_due_in == 0


def test_a_key_emptied_by_a_replace_takes_no_place(pair: Pair) -> None:
    """A job moved from key k1 to k2 by a replace leaves k1's turn behind (its queue empty):
    the claim passes over it to k2 in the same call, in both stores. Found by the long
    differential run (in process the empty queue took the claim's one place; over Redis
    a second script call found k2)."""
    add(pair, "a", limit_key="k1", lane="other")
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"))))
    pair.clock.advance(125)
    add(pair, "a", limit_key="k2", lane="other")
    m, r = pair.both(lambda s: s.claim_due({"default": 1, "other": 1}, 5, "owner-1"))
    assert sorted(claims(m)) == sorted(claims(r))
    assert {c.job_id for c in m.claims} == {"a", "c"}


def test_a_planned_series_counts_against_its_keys_rate(pair: Pair) -> None:
    """A keyed cron series back from a gap and a re-run of the same key, under a rate of
    1 per second: the series, first in line, takes the one start (in process planned and
    claimed in place; over Redis planned, then claimed in the claim's next call, which
    the re-run had taken before). Found by the long differential run."""
    limit(pair, "k1", flow.limit(rate=1, per=1))
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"), limit_key="k1")))
    add(pair, "a", limit_key="k1", retry=RetryPolicy(max_attempts=2))
    pair.clock.advance(0.001)
    claim(pair, capacity=1, lease=5)  # a
    pair.clock.advance(3_700)  # a's lease is lost: its re-run waits behind the series
    got, _, _ = ids(pair, 2, lease=5)
    assert got == ["c"]


def test_a_planned_series_holds_its_key_across_priorities(pair: Pair) -> None:
    """Concurrency 1 on a key with a cron series back from a gap (priority 0) and a
    one-off of priority -1: the series takes the key's one slot (planned and claimed in
    place in process; over Redis the one-off of the lower priority took it in the first
    script call). Found by the long differential run."""
    limit(pair, "k1", flow.limit(concurrency=1))
    pair.both(lambda s: s.add(job("c", Cron("* * * * *"), limit_key="k1")))
    add(pair, "a", limit_key="k1", priority=-1)
    pair.clock.advance(125)
    got, _, _ = ids(pair, 2, lease=5)
    assert got == ["c"]


# ---- a claim a rate counted, at its start ---------------------------------------------------


class _Outcomes(Metrics):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def finished(self, lane: str, outcome: str) -> None:
        self.seen.append(outcome)


@pytest.mark.parametrize("late", [True, False])
def test_a_rated_claim_that_cannot_start_in_time_is_handed_back(store: Any, late: bool) -> None:
    """Started later than ``RATE_START_WITHIN`` after its claim was read, a claim its key's
    rate counted could put more starts in a window than the rate allows: the runner hands
    it back unstarted (same attempt) instead; in time, it runs."""
    clock = store.clock
    store.set_limit("api:x", flow.limit(rate=5, per=1))
    store.add(job("j", After(0), limit_key="api:x"))
    clock.advance(0.001)
    (c,) = store.claim_due({"default": 1}, 30, "r1").claims
    ran: list[str] = []
    metrics, timers = _Outcomes(), Timers(clock)
    runner = Runner(store, clock, timers, lambda _t: lambda: ran.append("j"), metrics=metrics)
    try:
        read_at = clock.now() - (flow.RATE_START_WITHIN + 0.001 if late else 0)
        runner.run(Work(c, read_at))
        runner.flush_acks()
    finally:
        timers.close()
    if late:
        assert ran == [] and metrics.seen == ["late"]
        info = store.get("j")
        assert info is not None and info.state == "scheduled" and info.running == ()
        (again,) = store.claim_due({"default": 1}, 30, "r1").claims
        assert again.job_id == "j" and again.attempt == 1
    else:
        assert ran == ["j"] and metrics.seen == ["succeeded"]


def test_series_planned_in_one_claim_keep_their_turn_order(pair: Pair) -> None:
    """Two calendar series of one lane due at once, one with a limit key: the queue without
    a key has the turn first (equal turns), and Redis's claim, which plans them in a first
    call and claims them in a second, puts them back in that order (found by the long
    differential run)."""
    pair.both(lambda s: s.add(job("j1", Cron("* * * * *"), lane="other", limit_key="k1")))
    pair.both(lambda s: s.add(job("j2", Cron("* * * * *"), lane="other")))
    pair.clock.advance(125)
    m, r = pair.both(lambda s: s.claim_due({"other": 2}, 5, "o"))
    assert claims(m) == claims(r)
    assert [c.job_id for c in m.claims] == ["j2", "j1"]


def test_a_key_filled_at_a_lower_priority_asks_again_only_for_others(pair: Pair) -> None:
    """A claim serves key k1 at priority 0 (a re-run; the series' next occurrence waits for
    it) and fills k1's concurrency at priority -1: the claim's next ask is not "now" for
    k1's queue (a slot's end gives its turn back) but the next due time of the rest, in
    both stores; over Redis the cron job's plan makes a second script call, which judged
    k1 full where the in-process store, one step, did not (found by the long run)."""
    limit(pair, "k1", flow.limit(concurrency=2))
    pair.both(lambda s: s.add(job("j1", Every(1), limit_key="k1")))
    pair.clock.advance(5.001)
    add(pair, "j4", limit_key="k1", priority=-1)
    claim(pair, capacity=1, lease=5)
    pair.both(lambda s: s.add(job("j3", Cron("*/10 * * * * *"), lane="other", limit_key="k2")))
    pair.clock.advance(61)  # j1's lease expired: its run comes back as a re-run
    m, r = pair.both(lambda s: s.claim_due({"default": 3, "other": 3}, 5, "o"))
    assert claims(m) == claims(r)
    assert sorted(c.job_id for c in m.claims) == ["j1", "j3", "j4"]
    assert m.next_due_in == pytest.approx(r.next_due_in, abs=0.0011)
    assert m.next_due_in > 1  # j3's next occurrence, not k1's waiting queue
