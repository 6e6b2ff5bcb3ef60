-- include/check.lua: decide, then write. A script reads a job's hash once (claim: twice
-- for some jobs, include/inspect.lua), with every field it will parse, and checks it
-- before the first write that concerns the job (scripts do not roll back): the key's type,
-- each field by RULES (integers as core's int() reads them, enumerations among their
-- values, sizes) and the fields its kind needs; one that fails is moved aside (aside.lua).
-- Provides: DEF_MAX, FIELD_MAX, queued_ok, stash_ok, RULES, ENUMS, WHAT, rule_ok, ASKED,
--   field_problem, missing_field, read_job
-- Key families: layout, job:<job_id>

--@include core
--@include job
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

-- field -> its rule: the least integer it may hold, or a kind of text (flat tables: every
-- call builds them). ENUMS: an enumeration's values between spaces (2 spaces: "" too).
local RULES = {gen = 0, running = 0, k = 0, runs = 0, failures = 0, max_stalls = 1,
  interval = 'iv', grace = -1, retries = 'int', anchor = 'int', next = 'int', after = 'int|',
  since = 'int|', ready = 'int|', window = '0|', kind = 'enum', misfire = 'enum', overlap = 'enum',
  delivery = 'enum', state = 'enum', cancelled = 'enum', paused = 'enum', replan = 'enum',
  go = 'enum', lists = 'enum', e = 'hex', lane = 'name', def = 'utf8', queued = 'queued',
  stash = 'stash'}
local ENUMS = {kind = ' after at every cron ', misfire = ' skip run_once catch_up ',
  overlap = ' skip allow queue ', delivery = ' at_least_once at_most_once ',
  state = '  succeeded failed abandoned cancelled ', cancelled = '  0 1 ', paused = '  0 1 ',
  replan = '  0 1 ', go = '  0 1 ', lists = '  0 1 '}
local WHAT = {[0] = 'an integer >= 0', [1] = 'an integer >= 1', [-1] = 'an integer >= -1',
  int = 'an integer', ['int|'] = 'an integer or empty', ['0|'] = 'empty or >= 0',
  iv = 'whole ms >= 1 or "<p>/<q>" ms', hex = 'hex or empty', name = 'a lane name',
  utf8 = 'non-empty UTF-8 text', queued = '"<ms>|<k>" or empty', stash = 'lines of "<ms> <due member>"',
  kind = 'after, at, every or cron', misfire = 'skip, run_once or catch_up',
  overlap = 'skip, allow or queue', delivery = 'at_least_once or at_most_once',
  state = 'a final state or empty', flag = '0, 1 or empty'}

-- Does value `v` follow the rule of field `name`?
local function rule_ok(name, v)
  local rule = RULES[name]
  if type(rule) == 'number' then return int(v) ~= nil and int(v) >= rule end
  if rule == 'int' or rule == 'int|' then return int(v) ~= nil or (rule == 'int|' and v == '') end
  if rule == '0|' then return v == '' or (int(v) ~= nil and int(v) >= 0) end
  if rule == 'enum' then
    return not string.find(v, ' ', 1, true) and string.find(ENUMS[name], ' ' .. v .. ' ', 1, true) ~= nil
  end
  if rule == 'iv' then return interval_of(v) ~= nil end
  if rule == 'hex' then return #v <= 16 and string.match(v, '^%x*$') ~= nil end
  if rule == 'name' then return v ~= '' end
  if rule == 'utf8' then return v ~= '' and (not string.find(v, '[\128-\255]') or utf8_ok(v)) end
  if rule == 'queued' or rule == 'stash' then return v == '' or (rule == 'queued' and queued_ok or stash_ok)(v) end
  return true
end

local ASKED = {}  -- a list of field names -> the set of them

-- Why value `v` of field `name` does not parse (nil: it does).
local function field_problem(name, v)
  local max = (name == 'def' or name == 'stash') and DEF_MAX or FIELD_MAX
  if #v > max then return 'field ' .. name .. ' is over ' .. fmt(max) .. ' bytes' end
  if rule_ok(name, v) then return nil end
  return 'field ' .. name .. ' is not ' .. (WHAT[RULES[name]] or WHAT[name] or WHAT.flag)
end

-- A field that `f` (the fields `names`, defaults applied) must hold but lacks, or nil.
local function missing_field(f, names)
  local asked = ASKED[names]
  if not asked then  -- once per list of names and call
    asked = {}
    for _, name in ipairs(names) do asked[name] = true end
    ASKED[names] = asked
  end
  local need = {'def', 'kind', (f.e and f.e ~= '') and 'next' or 'def'}  -- next: while pending
  if f.kind == 'every' then need[4], need[5], need[6] = 'anchor', 'interval', 'grace' end
  if f.kind == 'cron' then need[4], need[5] = 'grace', 'next' end
  for _, name in ipairs(need) do
    if asked[name] and not f[name] then return name end
  end
  return nil
end

-- The fields `names` (gen among them) of `job`'s hash, checked: the fields (DEFAULTS
-- applied), nil if there is no such job; or nil, why it does not parse, and the key's TYPE.
local function read_job(job, names)
  local jk = jkey(job)
  local got = redis.pcall('HMGET', jk, unpack(names))
  if got['err'] then
    local t = redis.call('TYPE', jk)['ok']
    return nil, 'malformed job data: the job key is a ' .. t .. ', not a hash', t
  end
  local f = {}
  for i, name in ipairs(names) do
    local v = got[i]
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
  local lacks = missing_field(f, names)
  if lacks then return nil, 'malformed job data: field ' .. lacks .. ' is missing', 'hash' end
  return f
end
