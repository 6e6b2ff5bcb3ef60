"""Watching limits, the same in both stores (docs/flow-control.md, "Watching limits"):
what waits on each declared limit (``limit_usage``) and what holds a due job back
(``hold_of``), with the rule that attributes a due job's wait to its limit when its key's
limit is full at the time of reading.

Each test drives a ``MemoryStore`` and a ``RedisStore`` (fakeredis, and a real
``redis-server``) on one fake clock through the same steps and asserts both the figures
and that the two stores agree. Periods are long (60 s), so that a Redis window's TTL
(real time) never runs out under the fake clock.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler import flow
from scheduler.errors import JobNotFoundError
from scheduler.limit_usage import Hold, ScopeUsage
from tests.contract.test_flow import add, ids, limit
from tests.model.test_divergences import Pair


def usage(p: Pair, top: int = 10) -> list[ScopeUsage]:
    """``limit_usage`` of both stores: the same."""
    m, r = p.both(lambda s: s.limit_usage(top))  # type: ignore[attr-defined]
    assert m == r
    return list(m)


def hold(p: Pair, job_id: str) -> Hold | None:
    """``hold_of`` of both stores: the same."""
    m, r = p.both(lambda s: s.hold_of(job_id))  # type: ignore[attr-defined]
    assert m == r
    return m  # type: ignore[no-any-return]


def figures(u: ScopeUsage) -> dict[str, Any]:
    return {k: v for k, v in u._asdict().items() if k not in ("limit", "top")}


def test_a_rate_full_key(pair: Pair) -> None:
    limit(pair, "api:x", flow.limit(rate=2, per=60))
    for i in range(5):
        add(pair, f"j{i}", limit_key="api:x")
    pair.clock.advance(0.5)
    assert ids(pair)[0] == ["j0", "j1"]
    pair.clock.advance(1.25)
    (u,) = usage(pair)
    assert figures(u) == {
        "scope": "api:x",
        "keys": 1,
        "full_keys": 1,
        "running": 2,
        "window_starts": 2,
        "waiting": 3,
        "held": 3,
        "oldest_wait": 1.75,
    }
    (key,) = u.top
    assert (key.key, key.full) == ("api:x", "rate")
    # the window counts a claim for the period and the guard: 60.04 s from 0.5 s
    assert key.next_start_in == pytest.approx(60.04 - 1.25)
    h = hold(pair, "j2")
    assert h is not None and (h.reason, h.window_starts, h.waited) == ("rate", 2, 1.75)
    assert h.describe() == (
        "limit api:x (rate 2 per 60s: 2 started in the window; next start allowed in 58.8 s)"
    )
    pair.clock.advance(60.04 - 1.25)  # the window allows a start again: not held any more
    assert hold(pair, "j2") is None
    (u,) = usage(pair)
    assert (u.waiting, u.held, u.full_keys, u.window_starts) == (3, 0, 0, 0)


def test_a_concurrency_full_key(pair: Pair) -> None:
    limit(pair, "tenant:1", flow.limit(concurrency=1))
    for i in range(3):
        add(pair, f"t{i}", limit_key="tenant:1")
    pair.clock.advance(0.001)
    got, m, r = ids(pair)
    assert got == ["t0"]
    pair.clock.advance(2)
    (u,) = usage(pair)
    assert (u.running, u.waiting, u.held, u.full_keys, u.oldest_wait) == (1, 2, 2, 1, 2.001)
    h = hold(pair, "t1")
    assert h is not None and h.describe() == "limit tenant:1 (concurrency 1: 1 running)"
    assert hold(pair, "t0") is None  # it runs: not held
    assert pair.mem.complete(m.claims[0], None) == pair.red.complete(r.claims[0], None)  # type: ignore[attr-defined]
    # a slot is free: its jobs are due and wait (for a claim), but not for the limit
    assert hold(pair, "t1") is None
    (u,) = usage(pair)
    assert (u.running, u.waiting, u.held, u.full_keys) == (0, 2, 0, 0)


def test_a_pattern_scope_adds_up_its_keys_and_lists_the_top_ones(pair: Pair) -> None:
    limit(pair, "customer:*", flow.limit(concurrency=1))
    limit(pair, "customer:vip", flow.limit(concurrency=5))  # its own limit: not the pattern's
    for key, n in (("customer:1", 4), ("customer:2", 1), ("customer:3", 3), ("customer:vip", 2)):
        for i in range(n):
            add(pair, f"{key}-{i}", limit_key=key)
    add(pair, "eu", limit_key="eu:customer:1")  # no declared scope governs it
    pair.clock.advance(0.001)
    got = ids(pair)[0]
    assert sorted(got) == sorted(
        ["customer:1-0", "customer:2-0", "customer:3-0", "customer:vip-0", "customer:vip-1", "eu"]
    )
    pair.clock.advance(1)
    pattern, vip = usage(pair)
    assert (pattern.scope, vip.scope) == ("customer:*", "customer:vip")
    assert (pattern.keys, pattern.full_keys, pattern.running) == (3, 3, 3)
    assert (pattern.waiting, pattern.held) == (3 + 0 + 2, 5)
    assert [(k.key, k.waiting) for k in pattern.top] == [
        ("customer:1", 3),
        ("customer:3", 2),
        ("customer:2", 0),
    ]
    assert (vip.keys, vip.running, vip.waiting, vip.held, vip.full_keys) == (1, 2, 0, 0, 0)
    top2 = usage(pair, top=2)[0]
    assert [k.key for k in top2.top] == ["customer:1", "customer:3"]
    assert top2._replace(top=()) == pattern._replace(top=())  # the figures cover every key
    h = hold(pair, "customer:3-1")
    assert h is not None
    assert (h.key, h.scope, h.reason) == ("customer:3", "customer:*", "concurrency")


def test_a_key_without_a_limit_is_never_held(pair: Pair) -> None:
    limit(pair, "other", flow.limit(concurrency=1))
    for i in range(3):
        add(pair, f"f{i}", limit_key="free")
    add(pair, "plain")
    pair.clock.advance(0.001)
    assert ids(pair, 1)[0] == ["plain"]  # the keyed ones wait for a worker, not a limit
    pair.clock.advance(1)
    assert [hold(pair, j) for j in ("f0", "f1", "f2")] == [None, None, None]
    (u,) = usage(pair)
    assert u.scope == "other" and (u.keys, u.running, u.waiting, u.top) == (0, 0, 0, ())
    assert u.oldest_wait is None


def test_a_job_not_due_paused_or_running_is_not_held(pair: Pair) -> None:
    limit(pair, "k", flow.limit(concurrency=1))
    add(pair, "first", limit_key="k")
    add(pair, "later", 30, limit_key="k")
    add(pair, "paused", limit_key="k")
    pair.both(lambda s: s.pause("paused"))
    pair.clock.advance(0.001)
    assert ids(pair)[0] == ["first"]
    assert [hold(pair, j) for j in ("first", "later", "paused")] == [None, None, None]
    (u,) = usage(pair)
    assert (u.running, u.waiting, u.held) == (1, 0, 0)  # a paused job waits for its resume
    pair.both(lambda s: s.resume("paused"))
    assert hold(pair, "paused") is not None


def test_removing_a_limit(pair: Pair) -> None:
    limit(pair, "k:*", flow.limit(concurrency=1))
    for i in range(2):
        add(pair, f"j{i}", limit_key="k:1")
    pair.clock.advance(0.001)
    assert ids(pair)[0] == ["j0"]
    assert hold(pair, "j1") is not None
    limit(pair, "k:*", None)
    assert hold(pair, "j1") is None
    assert usage(pair) == []  # no limit declared: nothing to show


def test_an_unknown_job_is_refused_and_a_finished_one_is_not_held(pair: Pair) -> None:
    for store in (pair.mem, pair.red):
        with pytest.raises(JobNotFoundError, match="no job with id 'nope'"):
            store.hold_of("nope")  # type: ignore[attr-defined]
    add(pair, "done")
    pair.clock.advance(0.001)
    _, m, r = ids(pair)
    pair.mem.complete(m.claims[0], None)
    pair.red.complete(r.claims[0], None)
    assert hold(pair, "done") is None
