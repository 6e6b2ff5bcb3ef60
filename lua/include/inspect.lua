-- include/inspect.lua: claim.lua's lane loop, decide then write. Each round fetches due
-- members and inspects every one, read only (the member parsed, its job's fields read
-- once and checked, include/check.lua); only then are the inspected members removed from
-- the due set and each admitted (include/admit.lua): claimed, dropped, stashed, or moved
-- aside on its own when its data does not parse. A second member of a job already in the
-- round waits for the next round (the first one's writes change what it would read).
-- Provides: ADMIT_FIELDS, inspect, claim_lane
-- Key families: layout, job:<job_id>, events, stats, quarantined, quarantined:<entry>,
--   skips:<job_id>, fence, running, lease, due:<lane>, seq, wake

--@include core
--@include due
--@include skips
--@include check
--@include aside
--@include admit

-- Every field admission may parse (read once per member, passed on).
local ADMIT_FIELDS = {'gen', 'cancelled', 'e', 'paused', 'kind', 'def', 'running', 'overlap',
  'misfire', 'next', 'k', 'anchor', 'interval', 'grace', 'queued', 'window', 'after', 'replan',
  'go', 'stash', 'retries', 'ready'}

-- What admission needs to know about due `member` (scored `score`), read only: {member,
-- score, m (parsed), f (its job's checked fields; nil: no such job)}, or `bad` (what to
-- record when it is moved aside).
local function inspect(member, score)
  local x = {member = member, score = score}
  local m = parse_member(member)
  if not m then
    x.bad = {id = member_entry(member), job = '', reason = 'malformed due entry', type = ''}
    return x
  end
  local f, why, t = read_job(m.job, ADMIT_FIELDS)
  if f and (f.kind == 'every' or f.kind == 'cron') and skips_problem(m.job) then
    why, t = 'malformed job data: ' .. skips_problem(m.job), 'hash'
  end
  if why then x.bad = {id = m.job, job = m.job, reason = why, type = t} end
  x.m, x.f = m, f
  return x
end

-- Claim up to `cap` due members of `lane` into batch `b`; returns the capacity left.
local function claim_lane(b, lane, cap)
  local key = P .. 'due:' .. lane
  local budget = cap * 4 + 16          -- bound the work of one call (stale entries)
  while cap > 0 and budget > 0 do
    -- at most min(cap, budget) members: each is decided in this round, or left untouched
    local due = redis.call('ZRANGEBYSCORE', key, '-inf', b.now, 'WITHSCORES', 'LIMIT', 0,
      math.min(cap, budget))
    if #due == 0 then break end
    local looks, members, jobs = {}, {}, {}
    for i = 1, #due, 2 do
      local x = inspect(due[i], tonumber(due[i + 1]))
      local job = x.m and x.m.job
      if job and jobs[job] then break end
      if job then jobs[job] = true end
      looks[#looks + 1], members[#members + 1] = x, due[i]
    end
    redis.call('ZREM', key, unpack(members))
    for _, x in ipairs(looks) do
      budget = budget - 1
      if admit(b, lane, x) then cap = cap - 1 end
    end
  end
  return cap
end
