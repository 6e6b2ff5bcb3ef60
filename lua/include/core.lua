-- include/core.lua: what every script runs first: the key prefix, number helpers, the
-- check of ARGV[2], the check of the namespace's data layout, and the clock.
-- Provides: P, DIGITS, fmt, int, at_ms, corrupt_key, expect, expect_int, LAYOUT, LAYOUT_EXACT,
--   LAYOUT_READY, LAYOUT_PACKED, layout, need_layout, now_ms,
--   now_ms_us, now_up
-- Key families: layout
--
-- Conventions of every script:
--   ARGV[1]  key prefix "duetime:{<namespace>}:" (every key shares its hash tag, so a
--            script touches one cluster slot)
--   ARGV[2]  "" to use Redis TIME as "now", or an integer epoch ms (test clocks only)
--   times are integer epoch milliseconds, formatted with %d (never tostring)
--   every script validates its input before its first write (scripts do not roll back)
--   decide, then write: every script reads and checks what it will parse (key types,
--            fields) before the first write that concerns it (lua/README.md)

--@call
local P = ARGV[1]
--@end

local DIGITS = {[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}  -- fmt's common case
local function fmt(n) return DIGITS[n] or string.format('%d', n) end

-- An integer argument (ms, counts): digits only, so nan, inf, 1.5 and 0x10 are refused.
local function int(s)
  if type(s) == 'string' and #s <= 16 and string.find(s, '^%-?%d+$') then
    return tonumber(s)
  end
  return nil
end

-- The "@<ms>" a RUNNING entry or a retry's due member may carry after its sched (its
-- claim's ready, include/issue.lua): that ms, 0 for none (''), nil if it does not parse.
local function at_ms(at)
  if at == '' then return 0 end
  return string.sub(at, 1, 1) == '@' and int(string.sub(at, 2)) or nil
end

-- Namespace-wide keys (due sets, lease, running, events, stats, counters, ...) cannot be
-- moved aside: a script that finds one of the wrong type answers this error before its
-- first write ("ERR duetime corrupt <key> is a <type>, expected <type>").
local function corrupt_key(key, what)
  return redis.error_reply('ERR duetime corrupt ' .. key .. ' ' .. what)
end

-- nil if `key` is of type `want` (or absent), else the error reply. A hash's or a sorted
-- set's O(1) count answers for it (TYPE's reply is a table: ~2k more; both are commands
-- deploy/users.acl grants), TYPE then names another type; TYPE asks of the rest.
local function expect(key, want)
  local count = want == 'hash' and 'HLEN' or want == 'zset' and 'ZCARD'
  if count and type(redis.pcall(count, key)) == 'number' then return nil end
  local t = redis.call('TYPE', key)['ok']
  return t ~= want and t ~= 'none' and corrupt_key(key, 'is a ' .. t .. ', expected ' .. want) or nil
end

-- A counter (fence, seq, gen): its value (nil if absent), or nil and the error reply.
local function expect_int(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return nil, corrupt_key(key, 'is a ' .. redis.call('TYPE', key)['ok'] .. ', expected string')
  end
  if v and not int(v) then return nil, corrupt_key(key, 'is not an integer, expected an integer') end
  return v or nil
end

--@call
if ARGV[2] ~= '' and not int(ARGV[2]) then
  return redis.error_reply('ERR duetime bad-input now')
end
--@end

-- The data layout these scripts read and write, recorded in the namespace; one written by
-- another layout is refused loudly, never misread (producers and replicas of two versions).
-- Layout 2 adds fractional intervals ("<p>/<q>" ms, include/grid.lua); 3 a kept ready
-- ("<sched>@<ready>" in RUNNING entries and re-run members); 4 a job's small fields in one
-- (`st`, include/st.lua). The script that first writes such data records it (`need_layout`),
-- so an older duetime refuses the namespace instead of moving its entries aside as malformed.
local LAYOUT, LAYOUT_EXACT, LAYOUT_READY, LAYOUT_PACKED = '1', '2', '3', '4'
--@call
local layout = redis.pcall('GET', P .. 'layout')
if type(layout) == 'table' then
  return corrupt_key(P .. 'layout', 'is a ' .. redis.call('TYPE', P .. 'layout')['ok'] ..
    ', expected string')
end
if layout and layout ~= LAYOUT and layout ~= LAYOUT_EXACT and layout ~= LAYOUT_READY and
    layout ~= LAYOUT_PACKED then
  return redis.error_reply('ERR duetime layout ' .. layout .. ' in this namespace, but this ' ..
    'duetime reads layouts 1 to 4: run one version of duetime per namespace')
end
--@end

-- Record layout `v` unless the namespace's is already it or newer (each adds to the last).
local function need_layout(v)
  if not layout or layout < v then
    redis.call('SET', P .. 'layout', v)
    layout = v
  end
end

local function now_ms()
  if ARGV[2] ~= '' then return tonumber(ARGV[2]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Now in ms (as now_ms) and the microseconds past it (0 with an override): a claim's
-- reply carries both, so a caller's "ask again in" is not late by up to 1 ms.
local function now_ms_us()
  if ARGV[2] ~= '' then return tonumber(ARGV[2]), 0 end
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  return tonumber(t[1]) * 1000 + math.floor(us / 1000), us % 1000
end

-- Now rounded up to the ms: what a delay counts from, so a job is never due early.
local function now_up()
  if ARGV[2] ~= '' then return tonumber(ARGV[2]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
end
