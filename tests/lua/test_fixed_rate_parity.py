"""One truth for fixed-rate arithmetic: scheduler/schedules.py (Python) and the grid unit
of the Lua scripts (lua/include/grid.lua: ``occ``, ``last_le``, ``first_ge``, ``plan``),
run on the same integer-millisecond inputs, give the same answers. Intervals are stored
fields: whole ms ("250") or exact fractions of a ms ("1000/3" for every=1/3 s;
scheduler/stores/redis/protocol/intervals.py), so occurrence k is due at anchor + ceil(k * p/q) ms.

The Lua side runs in the real redis-server (EVAL), because Redis's Lua 5.1 numbers are
doubles: integers are exact up to 2^53 ms (the year 287,396), and every value these inputs
reach (due times, ``now``, the grid point after it) stays within that, right up to it.
Beyond 2^53 Lua cannot represent the inputs themselves, so answers differ there (found
while writing this test; see lua/README.md). Many cases go in one EVAL (a JSON array in
ARGV[1]; answers back as JSON, integers printed exactly with %.0f).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import schedules
from scheduler.model import Misfire
from scheduler.stores.redis.protocol import intervals
from scheduler.stores.redis.protocol import scripts as lua

pytestmark = pytest.mark.redis

EXACT = 2**53  # the largest ms value every double below it represents exactly
DAY = 86_400_000
TEN_YEARS = 3_652 * DAY + DAY // 2  # 365.25 days a year
LATENESS_MAX = 10**12  # about 32 years

HARNESS = r"""#!lua flags=no-writes
--@include grid

-- An integer exactly (%.0f prints a double's integer value digit for digit).
local function out(x)
  if x == nil then return cjson.null end
  if x == math.floor(x) then return string.format('%.0f', x) end
  return string.format('%.17g', x)
end

local answers = {}
for i, c in ipairs(cjson.decode(ARGV[1])) do
  local anchor, field, k, now, t, policy, grace, window = unpack(c, 1, 8)
  local iv = interval_of(field)
  if window == cjson.null then window = nil end
  local run, next_k, skip_from, skip_to, reason = plan(anchor, iv, k, now, policy, grace, window)
  answers[i] = {out(occ(anchor, iv, k)), out(last_le(anchor, iv, t)),
    out(first_ge(anchor, iv, t)), out(run), out(next_k), out(skip_from), out(skip_to),
    reason or ''}
end
return cjson.encode(answers)
"""


@pytest.fixture(scope="module")
def lua_grid(redis_server: Any) -> Iterator[Any]:
    """The grid unit and the harness, registered on the test run's redis-server."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    script = client.register_script(lua.assemble(HARNESS, "the parity harness"))
    yield lambda cases: json.loads(script(keys=[], args=[json.dumps(cases)]))
    client.close()


def python_answers(case: list[Any]) -> list[str | None]:
    anchor, field, k, now, t, policy, grace, window = case
    iv = intervals.decode(field)
    p = schedules.plan(anchor, iv, k, now, Misfire(policy), grace, window)
    first, last = p.skipped or (None, None)

    def out(x: int | None) -> str | None:
        return None if x is None else str(x)

    return [
        out(schedules.occurrence(anchor, iv, k)),
        out(schedules.last_index_at_or_before(anchor, iv, t)),
        out(schedules.first_index_at_or_after(anchor, iv, t)),
        out(p.run),
        out(p.next_k),
        out(first),
        out(last),
        p.reason if p.skipped else "",  # Lua names a reason only with a skipped range
    ]


@st.composite
def cases(draw: st.DrawFn) -> list[Any]:
    """[anchor, interval field, k, now, t, policy, grace, window]: occurrence k (the one
    after the last run) is due at `now`; `t` is a time near it for last_le / first_ge. The
    interval is whole ms or p/q ms (q <= 10^6, p < 2^53: the stated domain)."""
    anchor = draw(st.integers(1_700_000_000_000, 1_900_000_000_000))
    whole = draw(st.one_of(st.integers(1, 1000), st.integers(1, DAY), st.integers(1, TEN_YEARS)))
    q = draw(st.one_of(st.just(1), st.sampled_from([2, 3, 7, 1000, 10**6]), st.integers(1, 10**6)))
    whole = max(1, min(whole, EXACT // q - 1))
    p = whole * q + draw(st.integers(0, q - 1))
    field = str(p) if q == 1 else f"{p}/{q}"
    iv = -(-p // q)  # the interval rounded up, in whole ms
    k_max = min(10**9, (EXACT - anchor - LATENESS_MAX - 4 * iv) // iv)
    k = draw(st.one_of(st.integers(0, 100), st.integers(0, k_max), st.just(k_max)))
    due = schedules.occurrence(anchor, intervals.decode(field), k)
    lateness = draw(
        st.one_of(
            st.sampled_from([0, 1]),
            st.integers(0, 3 * iv),
            st.integers(0, LATENESS_MAX),
        )
    )
    t = due + draw(st.one_of(st.sampled_from([-1, 0, 1]), st.integers(-2 * iv, 2 * iv)))
    policy = draw(st.sampled_from([m.value for m in Misfire]))
    grace = draw(st.one_of(st.just(0), st.just(min(iv, 60_000)), st.integers(0, 2 * iv)))
    window = draw(st.one_of(st.none(), st.just(0), st.integers(0, 10**10)))
    return [anchor, field, k, due + lateness, t, policy, grace, window]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(cases(), min_size=1, max_size=60))
def test_python_and_redis_lua_agree_on_fixed_rate_arithmetic(lua_grid, batch):
    for case, got in zip(batch, lua_grid(batch), strict=True):
        assert max(case[3], case[4]) + intervals.decode(case[1]) < EXACT  # the exact domain
        assert got == python_answers(case), f"input {case}"


def test_the_batch_reaches_the_edge_of_the_exact_domain(lua_grid):
    """The largest k these inputs allow, 10-year interval: due times near 2^53 ms."""
    anchor, iv = 1_800_000_000_000, TEN_YEARS
    k = (EXACT - anchor - LATENESS_MAX - 4 * iv) // iv
    batch = [
        [anchor, str(iv), k, anchor + k * iv + late, anchor + k * iv + dt, policy, 60_000, None]
        for late in (0, 1, iv - 1, iv, 2 * iv + 5)
        for dt in (-1, 0, 1, iv)
        for policy in ("skip", "run_once", "catch_up")
    ]
    assert max(c[3] + iv for c in batch) > EXACT // 2
    assert lua_grid(batch) == [python_answers(c) for c in batch]


def test_fractional_intervals_near_the_edge_of_the_exact_domain(lua_grid):
    """every=1/3 s and the finest fraction (1/10^6 ms) with due times near 2^53 ms."""
    batch = []
    for p, q in ((1000, 3), (10**6 + 1, 10**6), (333_333_333_334, 10**6), (EXACT - 1, 10**6)):
        iv = intervals.decode(f"{p}/{q}")
        anchor = 1_800_000_000_000
        k = int((EXACT - anchor - 4 * iv - LATENESS_MAX) // iv)
        due = schedules.occurrence(anchor, iv, k)
        batch += [
            [anchor, f"{p}/{q}", k, due + late, due + dt, policy, 60_000, None]
            for late in (0, 1, 2 * int(iv) + 5)
            for dt in (-1, 0, 1)
            for policy in ("skip", "run_once", "catch_up")
        ]
    assert lua_grid(batch) == [python_answers(c) for c in batch]
