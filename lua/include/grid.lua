-- include/grid.lua: fixed-rate grid arithmetic: occurrence k of a series is due at
-- anchor + ceil(k * interval) ms, exact (the interval a fraction of a ms: a + b/q), and
-- the misfire plan of a due occurrence. Pure (no Redis calls). Mirrors
-- scheduler/schedules.py; tests/lua/test_fixed_rate_parity.py runs both on the same
-- inputs and requires the same answers. Exact while every due time is below 2^53 ms.
-- Provides: occ, last_le, first_ge, plan
-- Key families: none

--@include interval

local function occ(anchor, iv, k)
  if iv.b == 0 then return anchor + k * iv.a end
  local kh, kl = divmod(k, iv.q)               -- k*b/q = kh*b + kl*b/q, kl*b < 10^12
  local up, rest = divmod(kl * iv.b, iv.q)
  if rest > 0 then up = up + 1 end
  return anchor + k * iv.a + kh * iv.b + up
end

-- The largest k with occ(k) <= t (-1 if the anchor is still ahead).
local function last_le(anchor, iv, t)
  if t < anchor then return -1 end
  local k = math.floor((t - anchor) / iv.ms)
  while occ(anchor, iv, k) > t do k = k - 1 end
  while occ(anchor, iv, k + 1) <= t do k = k + 1 end
  return k
end

-- The smallest k >= 0 with occ(k) >= t.
local function first_ge(anchor, iv, t)
  local k = math.max(0, math.ceil((t - anchor) / iv.ms))
  while k > 0 and occ(anchor, iv, k - 1) >= t do k = k - 1 end
  while occ(anchor, iv, k) < t do k = k + 1 end
  return k
end

-- The misfire plan for due occurrence k: run index (or nil), next k, skipped range, reason.
-- `window` (ms or nil): with catch_up, occurrences older than it are skipped.
local function plan(anchor, iv, k, now, policy, grace, window)
  local why = 'misfire'
  if policy == 'catch_up' then
    if not window then return k, k + 1 end
    grace, why = window, 'catch-up-window'
  end
  local on_time = first_ge(anchor, iv, now - grace)
  if k >= on_time then return k, k + 1 end
  local m = last_le(anchor, iv, now)
  if policy == 'run_once' then
    if m > k then return m, m + 1, k, m - 1, 'coalesced' end
    return m, m + 1
  end
  if on_time <= m then return on_time, on_time + 1, k, on_time - 1, why end
  return nil, m + 1, k, m, why
end
