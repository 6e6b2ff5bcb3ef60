-- include/check.lua: decide, then write. A script reads a job's hash once, with every
-- field it will parse, and checks it before the first write that concerns the job
-- (scripts do not roll back): the key's type, each field by RULES (integers as core's
-- int() reads them, enumerations among their values, sizes) and the fields the job's
-- kind needs. A job that fails is moved aside on its own (include/aside.lua).
-- Provides: DEF_MAX, FIELD_MAX, int_at_least, blank_or, one_of, queued_ok, stash_ok, RULES,
--   field_problem, missing_field, read_job
-- Key families: layout, job:<job_id>

--@include core
--@include job
--@include utf8

local DEF_MAX = 1048576  -- bytes of a definition (add.lua refuses a larger one) and a stash
local FIELD_MAX = 1024   -- bytes of any other field a script parses

local function int_at_least(lo)
  return function(v) local n = int(v) return n ~= nil and (lo == nil or n >= lo) end
end
local function blank_or(rule) return function(v) return v == '' or rule(v) end end
local function one_of(...)
  local set = {}
  for _, x in ipairs({...}) do set[x] = true end
  return function(v) return set[v] == true end
end

-- "<ms>|<k>" (a held occurrence; k empty for an overlap-queued one)
local function queued_ok(v)
  local s, k = string.match(v, '^(%d+)|(%-?%d*)$')
  return s ~= nil and int(s) ~= nil and (k == '' or int(k) ~= nil)
end

-- "<score> <due member>\n" lines (a paused job's due members)
local function stash_ok(v)
  local n = 0
  for score, member in string.gmatch(v, '(%d+) ([^\n]+)\n') do
    if not int(score) then return false end
    n = n + #score + #member + 2
  end
  return n == #v
end

-- field -> {test, what it must be}
local RULES = {
  gen = {int_at_least(0), 'an integer >= 0'}, running = {int_at_least(0), 'an integer >= 0'},
  retries = {int_at_least(), 'an integer'}, k = {int_at_least(0), 'an integer >= 0'},
  runs = {int_at_least(0), 'an integer >= 0'}, failures = {int_at_least(0), 'an integer >= 0'},
  max_stalls = {int_at_least(1), 'an integer >= 1'}, interval = {int_at_least(1), 'an integer >= 1'},
  grace = {int_at_least(-1), 'an integer >= -1'}, window = {blank_or(int_at_least(0)), 'empty or >= 0'},
  anchor = {int_at_least(), 'an integer'}, next = {int_at_least(), 'an integer'},
  after = {blank_or(int_at_least()), 'an integer or empty'},
  since = {blank_or(int_at_least()), 'an integer or empty'},
  kind = {one_of('after', 'at', 'every', 'cron'), 'after, at, every or cron'},
  misfire = {one_of('skip', 'run_once', 'catch_up'), 'skip, run_once or catch_up'},
  overlap = {one_of('skip', 'allow', 'queue'), 'skip, allow or queue'},
  delivery = {one_of('at_least_once', 'at_most_once'), 'at_least_once or at_most_once'},
  state = {one_of('', 'succeeded', 'failed', 'abandoned', 'cancelled'), 'a final state or empty'},
  cancelled = {one_of('', '0', '1'), '0, 1 or empty'}, paused = {one_of('', '0', '1'), '0, 1 or empty'},
  replan = {one_of('', '0', '1'), '0, 1 or empty'}, go = {one_of('', '0', '1'), '0, 1 or empty'},
  e = {function(v) return #v <= 16 and string.match(v, '^%x*$') ~= nil end, 'hex or empty'},
  lane = {function(v) return v ~= '' end, 'a lane name'},
  def = {function(v) return v ~= '' and (not string.find(v, '[\128-\255]') or utf8_ok(v)) end,
    'non-empty UTF-8 text'},
  queued = {blank_or(queued_ok), '"<ms>|<k>" or empty'},
  stash = {blank_or(stash_ok), 'lines of "<ms> <due member>"'},
}

-- Why value `v` of field `name` does not parse (nil: it does).
local function field_problem(name, v)
  local max = (name == 'def' or name == 'stash') and DEF_MAX or FIELD_MAX
  if #v > max then return 'field ' .. name .. ' is over ' .. fmt(max) .. ' bytes' end
  local rule = RULES[name]
  if rule and not rule[1](v) then return 'field ' .. name .. ' is not ' .. rule[2] end
  return nil
end

-- A field that `f` (the fields `asked`, defaults applied) must hold but lacks, or nil.
local function missing_field(f, asked)
  local need = {'def', 'kind'}
  if f.e and f.e ~= '' then need[#need + 1] = 'next' end
  if f.kind == 'every' then
    need[#need + 1], need[#need + 2], need[#need + 3] = 'anchor', 'interval', 'grace'
  elseif f.kind == 'cron' then
    need[#need + 1], need[#need + 2] = 'grace', 'next'
  end
  for _, name in ipairs(need) do
    if asked[name] and not f[name] then return name end
  end
  return nil
end

-- The fields `names` (gen among them) of `job`'s hash, checked. Returns the fields
-- (DEFAULTS applied), nil if there is no such job; or nil, why it does not parse, and the
-- key's TYPE.
local function read_job(job, names)
  local jk = jkey(job)
  local got = redis.pcall('HMGET', jk, unpack(names))
  if got['err'] then
    local t = redis.call('TYPE', jk)['ok']
    return nil, 'malformed job data: the job key is a ' .. t .. ', not a hash', t
  end
  local f, asked = {}, {}
  for i, name in ipairs(names) do
    local v = got[i]
    asked[name] = true
    if v then
      local why = field_problem(name, v)
      if why then return nil, 'malformed job data: ' .. why, 'hash' end
    end
    f[name] = v or DEFAULTS[name]
  end
  if not f.gen then  -- no job; or a hash that lost its generation
    if redis.call('HEXISTS', jk, 'def') == 0 then return nil end
    return nil, 'malformed job data: field gen is missing', 'hash'
  end
  local lacks = missing_field(f, asked)
  if lacks then return nil, 'malformed job data: field ' .. lacks .. ' is missing', 'hash' end
  return f
end
