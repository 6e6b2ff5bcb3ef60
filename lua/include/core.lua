-- include/core.lua: what every script runs first: the key prefix, number helpers, the
-- check of ARGV[2], the check of the namespace's data layout, and the clock.
-- Provides: P, fmt, int, LAYOUT, layout, now_ms
-- Key families: layout
--
-- Conventions of every script:
--   ARGV[1]  key prefix "duetime:{<namespace>}:" (every key shares its hash tag, so a
--            script touches one cluster slot)
--   ARGV[2]  "" to use Redis TIME as "now", or an integer epoch ms (test clocks only)
--   times are integer epoch milliseconds, formatted with %d (never tostring)
--   every script validates its input before its first write (scripts do not roll back)

local P = ARGV[1]

local function fmt(n) return string.format('%d', n) end

-- An integer argument (ms, counts): digits only, so nan, inf, 1.5 and 0x10 are refused.
local function int(s)
  if type(s) == 'string' and #s <= 16 and string.match(s, '^%-?%d+$') then
    return tonumber(s)
  end
  return nil
end

if ARGV[2] ~= '' and not int(ARGV[2]) then
  return redis.error_reply('ERR duetime bad-input now')
end

-- The data layout these scripts read and write. add.lua records it in the namespace; a
-- namespace written by another layout is refused loudly instead of misread silently
-- (e.g. producers and replicas of different versions during a rolling upgrade).
local LAYOUT = '1'
local layout = redis.call('GET', P .. 'layout')
if layout and layout ~= LAYOUT then
  return redis.error_reply('ERR duetime layout ' .. layout .. ' in this namespace, but this ' ..
    'duetime writes layout ' .. LAYOUT .. ': run one version of duetime per namespace')
end

local function now_ms()
  if ARGV[2] ~= '' then return tonumber(ARGV[2]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
