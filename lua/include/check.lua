-- include/check.lua: decide, then write. A script reads a job's hash once (claim: twice
-- for some jobs, include/inspect.lua), with every field it will parse, and checks it
-- before the first write that concerns the job (scripts do not roll back): the key's type,
-- each field by its rule (include/rules.lua: integers as core's int() reads them,
-- enumerations among their values, sizes) and the fields its kind needs; one that fails
-- is moved aside (aside.lua). A list of field names may carry `plain`, a reader of the
-- common case tried first (include/plain.lua).
-- Provides: rule_ok, field_problem, ASKED, asked_of, TAIL, missing_field, take_fields, read_job
-- Key families: layout, job:<job_id>

--@include core
--@include job
--@include rules

-- Does value `v` follow the rule of field `name` (its size included)?
local function rule_ok(name, v) return (RULE[name] or sized)(v) end

-- Why value `v` of field `name` does not parse (nil: it does).
local function field_problem(name, v)
  local max = (name == 'def' or name == 'stash' or name == 'reruns') and DEF_MAX or FIELD_MAX
  if #v > max then return 'field ' .. name .. ' is over ' .. fmt(max) .. ' bytes' end
  if rule_ok(name, v) then return nil end
  return 'field ' .. name .. ' is not ' .. what_of(name)
end

-- A list of field names -> {set = the set of them, defaults = those with a default}, once
-- per list and call.
--@call
local ASKED = {}
--@end
local function asked_of(names)
  local a = ASKED[names]
  if not a then
    a = {set = {}, defaults = {}}
    for _, name in ipairs(names) do
      a.set[name] = true
      if DEFAULTS[name] then a.defaults[#a.defaults + 1] = name end
    end
    ASKED[names] = a
  end
  return a
end

local TAIL = {every = {'anchor', 'interval', 'grace'}, cron = {'grace', 'next'}}

-- A field that `f` (the fields `names`, defaults applied) must hold but lacks, or nil:
-- def and kind; next while an occurrence is pending (e); then what its kind needs.
local function missing_field(f, names)
  local asked = asked_of(names).set
  if asked.def and not f.def then return 'def' end
  if asked.kind and not f.kind then return 'kind' end
  if asked.next and not f.next and f.e and f.e ~= '' then return 'next' end
  local tail = TAIL[f.kind or '']
  if not tail then return nil end
  for k = 1, #tail do
    if asked[tail[k]] and not f[tail[k]] then return tail[k] end
  end
  return nil
end

-- The values `got` (an HMGET reply) of the fields `names`, each checked, into `f`, and
-- DEFAULTS for those it lacks. Returns nil; or why one does not parse (the first in
-- `names`). Absent fields are not assigned (a table grows only by what it holds).
local function take_fields(f, names, got)
  for i = 1, #names do
    local v = got[i]
    if v then
      local name = names[i]
      if not (RULE[name] or sized)(v) then return 'malformed job data: ' .. field_problem(name, v) end
      f[name] = v
    end
  end
  local defaults = asked_of(names).defaults  -- (a numeric loop: ipairs costs a C call an item)
  for k = 1, #defaults do
    if f[defaults[k]] == nil then f[defaults[k]] = DEFAULTS[defaults[k]] end
  end
  return nil
end

-- The fields `names` (gen among them) of `job`'s hash, checked: the fields (DEFAULTS
-- applied), nil if there is no such job; or nil, why it does not parse, and the key's TYPE.
-- A plain reader (include/plain.lua) is offered the raw reply first (the fields not in st,
-- then st); with the fields it gives its plan for the write that follows (JOB.plain).
-- `raw`: that reply, if the caller read it (include/plain.lua's look).
local function read_job(job, names, raw)
  local jk, q = jkey(job), JOB.ask(names)
  raw = raw or redis.pcall('HMGET', jk, unpack(q.list))
  if raw['err'] then
    local t = redis.call('TYPE', jk)['ok']
    return nil, 'malformed job data: the job key is a ' .. t .. ', not a hash', t
  end
  if names.plain and raw[q.st] then
    local f, plan = names.plain(raw)
    if f then JOB.known[jk], JOB.plain[jk] = nil, plan; return f end
  end
  local got, bad = JOB.expand(jk, names, raw, q, redis.call)
  if not got then return nil, 'malformed job data: ' .. bad, 'hash' end
  local f = {}
  local why = take_fields(f, names, got)
  if why then return nil, why, 'hash' end
  if not f.gen then  -- no job; or a hash that lost its generation (def asked: its reply says)
    if asked_of(names).set.def then
      if not f.def then return nil end
    elseif redis.call('HEXISTS', jk, 'def') == 0 then
      return nil
    end
    return nil, 'malformed job data: field gen is missing', 'hash'
  end
  local lacks = missing_field(f, names)
  if lacks then return nil, 'malformed job data: field ' .. lacks .. ' is missing', 'hash' end
  return f
end
