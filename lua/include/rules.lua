-- include/rules.lua: what each field of a job's hash may hold, as one predicate per field
-- (RULE; sizes included: a definition, stash or reruns at most DEF_MAX bytes, any other field at
-- most FIELD_MAX), plain functions, some shared, so a read checks a field with one table
-- lookup and one call. Integers as core's int() reads them, parsed once; enumerations by
-- comparison (interned strings); a definition's UTF-8 scan only when it holds a byte
-- >= 0x80 (found by one pattern pass, in C). RULE is filled on its first lookup (a
-- script that checks no job field, as add.lua's add of a new job, builds none of it); the
-- enumerations' predicates are also names of their own (add.lua checks its arguments with
-- them). what_of: what a field must be (the text of the reason when it is not). Pure (no
-- Redis calls).
-- Provides: DEF_MAX, FIELD_MAX, queued_ok, stash_ok, unreported_ok, ascii, sized, kind_ok,
--   misfire_ok, overlap_ok, delivery_ok, RULE, fill_rules, what_of
-- Key families: layout

--@include core
--@include utf8
--@include interval

local DEF_MAX, FIELD_MAX = 1048576, 1024  -- bytes: a definition or stash; any other field

local function queued_ok(v)  -- "<ms>|<k>" (a held occurrence; k empty if overlap-queued)
  local s, k = string.match(v, '^(%d+)|(%-?%d*)$')
  return s ~= nil and int(s) ~= nil and (k == '' or int(k) ~= nil)
end

local function stash_ok(v)  -- "<score> <due member>\n" lines (a paused job's due members)
  local n = 0
  for score, member in string.gmatch(v, '(%d+) ([^\n]+)\n') do
    if not int(score) then return false end
    n = n + #score + #member + 2
  end
  return n == #v
end

local function unreported_ok(v)  -- "<first>|<last>|<count>|<reasons>" (include/skips.lua)
  local first, last, n = string.match(v, '^(%d+)|(%d+)|(%d+)|[%a,%-]+$')
  return first ~= nil and int(first) ~= nil and int(last) ~= nil and int(n) ~= nil
end

-- Does `s` hold only bytes < 0x80? One pattern pass in C (~50 instructions a byte; the
-- bytes pushed to math.max in slices took ~70; no C stack limit either way).
local function ascii(s) return string.find(s, '^[^\128-\255]*$') ~= nil end

local function sized(v) return #v <= FIELD_MAX end  -- a field with no other rule

local function kind_ok(v) return v == 'after' or v == 'at' or v == 'every' or v == 'cron' end
local function misfire_ok(v) return v == 'skip' or v == 'run_once' or v == 'catch_up' end
local function overlap_ok(v) return v == 'skip' or v == 'allow' or v == 'queue' end
local function delivery_ok(v) return v == 'at_least_once' or v == 'at_most_once' end

-- field -> its predicate (plain functions, built on a call's first lookup; a library keeps them)
local RULE
local function fill_rules()
  -- as int() reads them, without converting (a field is stored as its text): digits, and
  -- for nonneg "-0" too (int() reads it as 0)
  local find = string.find
  -- (the values most fields hold compared first: interned strings, no pattern run)
  local function nonneg(v)
    return v == '1' or v == '0' or (#v <= 16 and (find(v, '^%d+$') or find(v, '^%-0+$')) ~= nil)
  end
  local function integer(v) return v == '0' or (#v <= 16 and find(v, '^%-?%d+$') ~= nil) end
  local function int_or_empty(v) return v == '' or integer(v) end
  local function flag(v) return v == '' or v == '0' or v == '1' end
  RULE = {gen = nonneg, running = nonneg, k = nonneg, runs = nonneg, failures = nonneg,
    max_stalls = function(v) local n = int(v) return n ~= nil and n >= 1 end,
    -- how long a job's results are kept after a run ends, ms (its definition's
    -- result_ttl: docs/results.md), 1 s to 30 days; any `v` (retire.lua asks of absent ones)
    keep = function(v)
      if type(v) ~= 'string' or #v > 10 or not find(v, '^%d+$') then return false end
      local n = tonumber(v) return n >= 1000 and n <= 2592000000
    end,
    grace = function(v) local n = int(v) return n ~= nil and n >= -1 end,
    retries = integer, anchor = integer, next = integer, after = int_or_empty,
    since = int_or_empty, ready = int_or_empty, window = function(v) return v == '' or nonneg(v) end,
    interval = function(v) return interval_of(v) ~= nil end,
    kind = kind_ok, misfire = misfire_ok, overlap = overlap_ok, delivery = delivery_ok,
    state = function(v)
      return v == '' or v == 'succeeded' or v == 'failed' or v == 'abandoned' or v == 'cancelled'
    end,
    cancelled = flag, paused = flag, replan = flag, go = flag, lists = flag,
    e = function(v) return v == '' or (#v <= 16 and string.find(v, '^%x*$') ~= nil) end,
    lane = function(v) return v ~= '' and #v <= FIELD_MAX end,
    def = function(v) return v ~= '' and #v <= DEF_MAX and (ascii(v) or utf8_ok(v)) end,
    queued = function(v) return #v <= FIELD_MAX and (v == '' or queued_ok(v)) end,
    sk = function(v) return #v <= FIELD_MAX and (v == '' or unreported_ok(v)) end,
    stash = function(v) return #v <= DEF_MAX and (v == '' or stash_ok(v)) end,
    reruns = function(v) return #v <= DEF_MAX and (v == '' or stash_ok(v)) end}
end
--@call
RULE = RULE or setmetatable({}, {__index = function(_, name) fill_rules() return RULE[name] end})
--@end

-- What field `name` must be (read only when one is not).
local function what_of(name)
  local int_is = {gen = 0, running = 0, k = 0, runs = 0, failures = 0, max_stalls = 1, grace = -1}
  if int_is[name] then return 'an integer >= ' .. int_is[name] end
  return ({retries = 'an integer', anchor = 'an integer', next = 'an integer',
    after = 'an integer or empty', since = 'an integer or empty', ready = 'an integer or empty',
    window = 'empty or >= 0', interval = 'whole ms >= 1 or "<p>/<q>" ms', e = 'hex or empty',
    lane = 'a lane name', def = 'non-empty UTF-8 text', queued = '"<ms>|<k>" or empty',
    sk = '"<ms>|<ms>|<count>|<reasons>" or empty',
    stash = 'lines of "<ms> <due member>"', reruns = 'lines of "<ms> <due member>"', kind = 'after, at, every or cron',
    misfire = 'skip, run_once or catch_up', overlap = 'skip, allow or queue',
    delivery = 'at_least_once or at_most_once', state = 'a final state or empty',
    keep = 'whole ms from 1000 to 2592000000'})[name] or
    '0, 1 or empty'
end
