-- include/inspect.lua: claim.lua's lane loop, decide then write. Each round fetches due
-- members and inspects every one, read only (the member parsed, its job's fields read
-- once and checked, include/check.lua; a plain pending one-off the short way: PLAIN.look);
-- only then are the inspected members removed from the due set and each admitted
-- (include/admit.lua): claimed, dropped, stashed, or moved aside on its own when its data
-- does not parse. A second member of a job already in the round waits for the next round.
-- Provides: CLAIM_FIELDS, SERIES_FIELDS, PAUSED_FIELDS, read_more, inspect, sort_round, claim_lane
-- Key families: layout, job:<job_id>, events, stats, quarantined, quarantined:<entry>,
--   skips:<job_id>, fence, running, lease, due:<lane>, seq, wake, tasks, parked,
--   parked:<task>, replica:<owner>, levels:<lane>, turns:<level>

--@include core
--@include due
--@include skips
--@include check
--@include aside
--@include admit
--@include defer
--@include serve
--@include park
--@include reruns
--@include plain

-- The fields admission may parse: of every job (CLAIM_FIELDS); then only of a recurring job
-- (SERIES_FIELDS), a paused one-off (PAUSED_FIELDS: its stash), a re-run's (RERUN_FIELDS:
-- include/reruns.lua; `retries`, which a one-off's occurrence never parses). Each is read
-- once per member, checked, and passed on.
local CLAIM_FIELDS = {'gen', 'cancelled', 'e', 'paused', 'kind', 'def', 'running', 'next', 'ready',
  plain = PLAIN.claim}  -- a plain pending one-off, read the short way
local SERIES_FIELDS = {'overlap', 'misfire', 'k', 'anchor', 'interval', 'grace', 'queued',
  'window', 'after', 'replan', 'go', 'stash', 'sk', 'retries'}
local PAUSED_FIELDS = {'stash'}

-- More fields `names` of `job`, whose fields `f` read_job read and checked: checked the
-- same way, added to `f`. Returns f; or nil, why it does not parse, and 'hash'.
local function read_more(job, f, names)
  local got, bad = JOB.hmget(jkey(job), names, redis.call)  -- a hash: read_job saw it
  local why = not got and 'malformed job data: ' .. bad or take_fields(f, names, got)
  if why then return nil, why, 'hash' end
  local lacks = missing_field(f, names)
  if lacks then return nil, 'malformed job data: field ' .. lacks .. ' is missing', 'hash' end
  return f
end

-- What admission needs to know about due `member` (scored `score`), read only: {member,
-- score, m (parsed), f (its job's checked fields; nil: no such job)}, or `bad` (what to
-- record when it is moved aside).
local function inspect(member, score, raw)
  local m = parse_member(member)
  if not m then
    return {member = member, score = score,
      bad = {id = member_entry(member), job = '', reason = 'malformed due entry', type = ''}}
  end
  local f, why, t = read_job(m.job, CLAIM_FIELDS, raw)
  local series = f and (f.kind == 'every' or f.kind == 'cron')
  if series or (f and f.paused == '1') then
    f, why, t = read_more(m.job, f, series and SERIES_FIELDS or PAUSED_FIELDS)
  end
  local lines = f and (m.kind == 'r' or (series and tonumber(f.retries) > 0))  -- a re-run's
  if lines then f, why, t = read_more(m.job, f, RERUN_FIELDS[series and 1 or 2]) end
  if series and not why and skips_problem(m.job) then
    why, t = 'malformed job data: ' .. skips_problem(m.job), 'hash'
  end
  return {member = member, score = score, m = m, f = f,
    bad = why and {id = m.job, job = m.job, reason = why, type = t} or nil}
end

-- The due members `due` (member, score, ...) of `lane` fetched by one round, sorted: to
-- admit (looks; their members to remove), to park (their task has no live replica), or
-- passed over (counted, left due: a live replica serves their task, or an occurrence waits,
-- include/defer.lua; the lane's other due members go on). A round ends before a job's second.
local function sort_round(b, lane, due)
  local looks, members, jobs, parks, passed, q = {}, {}, {}, {}, 0, JOB.ask(CLAIM_FIELDS)
  for i = 1, #due, 2 do
    local x, raw = PLAIN.look(b, due[i], due[i + 1], q)  -- a plain one-off, due: the short way
    if not x then x = inspect(due[i], tonumber(due[i + 1]), raw) end
    local job = x.plain and x.job or x.m and x.m.job
    if job and not x.plain and defers(b, x) then
      passed = passed + 1
    else
      if job and jobs[job] then break end
      if job then jobs[job] = true end
      local tok = foreign(b, x)
      if not tok then
        looks[#looks + 1], members[#members + 1] = x, due[i]
      elseif not served_elsewhere(b.owner, tok) and parked_ok(tok) then
        parks[#parks + 1], members[#members + 1] = {tok, x}, due[i]
      else
        passed = passed + 1
      end
    end
  end
  return looks, members, parks, passed
end

-- Claim up to `cap` due members of `lane` into batch `b`; returns the capacity left. A
-- member whose task the claimant lacks is passed over while a live replica serves it, else
-- it waits (include/serve.lua); b.passed[lane] records that members were passed over:
-- 'all' (every due member was looked at) or 'more' (the budget ran out first).
local function claim_lane(b, lane, cap)
  local key, budget = P .. 'due:' .. lane, cap * 4 + 16  -- bound a call's work (stale entries)
  local passed = 0                     -- due members left (served elsewhere, or deferred)
  while cap > 0 and budget > 0 do
    -- at most min(cap, budget) members: each is decided in this round, or left untouched
    local due = redis.call('ZRANGEBYSCORE', key, '-inf', b.now, 'WITHSCORES', 'LIMIT', passed,
      math.min(cap, budget))
    if #due == 0 then break end
    local looks, members, parks, n = sort_round(b, lane, due)
    passed, budget = passed + n, budget - n
    if #members > 0 then redis.call('ZREM', key, unpack(members)) end
    budget = budget - #parks - #looks  -- (numeric loops: ipairs costs a C call an item)
    for k = 1, #parks do park(parks[k][1], parks[k][2].member, parks[k][2].score) end
    for k = 1, #looks do
      local x = looks[k]
      if (x.plain and PLAIN.issue(b, x)) or admit(b, lane, x) then cap = cap - 1 end
    end
  end
  if passed > 0 then b.passed[lane] = (cap > 0 and budget <= 0) and 'more' or 'all' end
  return cap
end
