-- include/interval.lua: the interval field of a fixed-rate job: whole ms ("250"), or an
-- exact fraction of a ms ("1000/3", scheduler/stores/redis/protocol/intervals.py), read as {a, b, q}
-- (a + b/q ms) for include/grid.lua; include/check.lua refuses any other text.
-- Pure (no Redis calls).
-- Provides: divmod, interval_of
-- Key families: none

-- x = n*q + r with 0 <= r < q (x, q integers below 2^53; the division may round).
local function divmod(x, q)
  local n = math.floor(x / q)
  local r = x - n * q
  if r < 0 then return n - 1, r + q end
  if r >= q then return n + 1, r - q end
  return n, r
end

-- An interval field ("<ms>", or "<p>/<q>": p/q ms with 1 <= q <= 10^6, q <= p < 2^53)
-- as {a, b, q} (a + b/q ms), or nil if it is not one.
local function interval_of(s)
  local p, q = string.match(s, '^(%d+)/(%d+)$')
  if not p then p, q = string.match(s, '^(%d+)$'), '1' end
  if not p or #p > 16 or #q > 7 then return nil end
  p, q = tonumber(p), tonumber(q)
  if q < 1 or q > 1000000 or p < q or p >= 9007199254740992 then return nil end
  local a, b = divmod(p, q)
  return {a = a, b = b, q = q, ms = p / q}
end
