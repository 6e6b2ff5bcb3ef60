"""One truth for fixed-rate arithmetic: scheduler/schedules.py (Python) and the grid unit
of the Lua scripts (lua/include/grid.lua: ``occ``, ``last_le``, ``first_ge``, ``plan``),
run on the same integer-millisecond inputs, give the same answers.

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
from scheduler.stores.redis import scripts as lua

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
  local anchor, iv, k, now, t, policy, grace, window = unpack(c, 1, 8)
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
    anchor, iv, k, now, t, policy, grace, window = case
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
    """[anchor, interval, k, now, t, policy, grace, window]: occurrence k (the one after
    the last run) is due at `now`; `t` is a time near it for last_le / first_ge."""
    anchor = draw(st.integers(1_700_000_000_000, 1_900_000_000_000))
    iv = draw(st.one_of(st.integers(1, 1000), st.integers(1, DAY), st.integers(1, TEN_YEARS)))
    k_max = min(10**9, (EXACT - anchor - LATENESS_MAX - 4 * iv) // iv)
    k = draw(st.one_of(st.integers(0, 100), st.integers(0, k_max), st.just(k_max)))
    due = anchor + k * iv
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
    return [anchor, iv, k, due + lateness, t, policy, grace, window]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(cases(), min_size=1, max_size=60))
def test_python_and_redis_lua_agree_on_fixed_rate_arithmetic(lua_grid, batch):
    for case, got in zip(batch, lua_grid(batch), strict=True):
        assert max(case[3], case[4]) + case[1] < EXACT  # inside the exact domain
        assert got == python_answers(case), f"input {case}"


def test_the_batch_reaches_the_edge_of_the_exact_domain(lua_grid):
    """The largest k these inputs allow, 10-year interval: due times near 2^53 ms."""
    anchor, iv = 1_800_000_000_000, TEN_YEARS
    k = (EXACT - anchor - LATENESS_MAX - 4 * iv) // iv
    batch = [
        [anchor, iv, k, anchor + k * iv + late, anchor + k * iv + dt, policy, 60_000, None]
        for late in (0, 1, iv - 1, iv, 2 * iv + 5)
        for dt in (-1, 0, 1, iv)
        for policy in ("skip", "run_once", "catch_up")
    ]
    assert max(c[3] + iv for c in batch) > EXACT // 2
    assert lua_grid(batch) == [python_answers(c) for c in batch]
