-- include/reap.lua: reaping expired leases (claim.lua, before it claims): each invocation
-- whose lease expired is due again with attempt+1 (at-least-once), abandoned (at-most-
-- once) or dead-lettered (its owner stalled max_stalls times, or the job was replaced or
-- cancelled meanwhile); then its job settles. Decide, then write: every expired lease is
-- inspected first (its RUNNING entry parsed, its job's fields checked); a lease whose
-- RUNNING entry is missing or does not parse, or whose job does not parse, is moved aside
-- on its own (include/aside.lua); a corrupt due set it would write to stops the call
-- before any write.
-- Provides: REAP_FIELDS, inspect_lease, reap_one, reap_order, reap
-- Key families: layout, job:<job_id>, running, lease, events, stats, due:<lane>, seq, wake,
--   dead:<job_id>, skips:<job_id>, bf:<job_id>, quarantined, quarantined:<entry>, dead-jobs,
--   done:<state>, paused, runs:<job_id>, flow:held, flow:run, flow:wait:<key>,
--   flow:win:<key>, levels:<lane>, limits, turns:<level>, waits, results, res:<invocation>

--@include core
--@include history
--@include tokens
--@include events
--@include due
--@include dead
--@include settle
--@include check
--@include aside
--@include told

-- Every field reaping and settling may parse.
local REAP_FIELDS = {'gen', 'cancelled', 'delivery', 'max_stalls', 'lane', 'queued', 'paused',
  'kind', 'e', 'retries', 'running', 'started', 'stash', 'reruns', 'keep'}

-- What reaping expired lease `token` needs, read only: {token, r, data (the RUNNING entry
-- as stored), f (its job's checked fields; nil: gone)} or `bad` (what to record when it is
-- moved aside); or nil and the error reply for a corrupt due set.
local function inspect_lease(token)
  local r, data = running_of(token)
  local x = {token = token, r = r, data = data or ''}
  if not r then
    local why = r == nil and 'lease without a RUNNING entry' or 'malformed RUNNING entry'
    x.bad = {id = token_entry(token), job = '', reason = why, type = ''}
    return x
  end
  local f, why, t = read_job(r.job, REAP_FIELDS)
  if f and dead_problem(r.job) then why, t = 'malformed job data: ' .. dead_problem(r.job), 'hash' end
  if why then
    x.bad = {id = r.job, job = r.job, reason = why, type = t}
    return x
  end
  x.f = f
  if f then
    local bad = lane_ok(f.lane)
    if bad then return nil, bad end
  end
  return x
end

-- Reap inspected lease `x` (already out of RUNNING).
local function reap_one(now, x)
  local r, f = x.r, x.f
  if x.bad then
    local q = x.bad
    q.member, q.lane, q.running, q.token = '', '', x.data, x.token
    move_aside(now, 'reap', q)
    return
  end
  event(now, 'lease_lost', r.job, r.sched, r.attempt, x.token)
  record_run(now, r.job, f, r, 'lease_lost')
  local how = 'failed'
  local live = f and f.gen == r.gen and f.cancelled ~= '1'
  local ended = nil
  if live and f.delivery == 'at_most_once' then
    how, ended = 'abandoned', {'abandoned', ''}
    event(now, 'abandoned', r.job, r.sched, r.attempt, 'lease lost')
  elseif live and r.stalls + 1 < tonumber(f.max_stalls) then
    push_retry(r.job, f.lane, r.gen, r.sched, r.attempt + 1, r.stalls + 1, now)
    how = 'released'
  elseif f then
    dead_letter(now, r.job, r.sched, r.attempt, 'lease lost')
    ended = {'failed', 'lease lost'}
  end
  if ended then TOLD.ended(now, r.job, r.sched, ended[1], ended[2], f) end
  settle(now, r.job, how)
end

-- The order leases ended in, then the invocations' scheduled times and jobs (as in
-- process: MemoryStore._reap_locked): their re-runs queue in that order, whatever fences
-- the claims handed out. A lease moved aside sorts before the others of its instant.
local function reap_order(a, b)
  if a.score ~= b.score then return a.score < b.score end
  local ra, rb = a.r or {sched = -1, job = ''}, b.r or {sched = -1, job = ''}
  if ra.sched ~= rb.sched then return ra.sched < rb.sched end
  if ra.job ~= rb.job then return ra.job < rb.job end
  return a.token < b.token
end

-- Reap up to 100 leases expired at `now` (one call stays short). Returns an error reply
-- (nothing written) if a due set to write to is corrupt. A lease of a job that an earlier
-- one moved aside waits for the next call.
local function reap(now)
  local looks, bad_jobs = {}, {}
  local due = redis.call('ZRANGEBYSCORE', P .. 'lease', '-inf', now, 'WITHSCORES', 'LIMIT', 0, 100)
  for i = 1, #due, 2 do
    local x, bad = inspect_lease(due[i])
    if not x then return bad end
    x.score = tonumber(due[i + 1])
    local job = x.r and x.r.job
    if job and bad_jobs[job] then break end
    if job and x.bad then bad_jobs[job] = true end
    looks[#looks + 1] = x
  end
  table.sort(looks, reap_order)
  for _, x in ipairs(looks) do
    drop_running(x.token)
    reap_one(now, x)
  end
  return nil
end
