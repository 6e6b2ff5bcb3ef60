-- include/reap.lua: reaping expired leases (claim.lua, before it claims): each invocation
-- whose lease expired is due again with attempt+1 (at-least-once), abandoned (at-most-
-- once) or dead-lettered (its owner stalled max_stalls times, or the job was replaced or
-- cancelled meanwhile); then its job settles.
-- Provides: reap_one, reap
-- Key families: layout, job:<job_id>, running, lease, events, stats, due:<lane>, seq,
--   wake, dead:<job_id>, skips:<job_id>, bf:<job_id>

--@include core
--@include job
--@include tokens
--@include events
--@include due
--@include dead
--@include settle

-- The running invocation `r` of `token`, whose lease expired (already out of RUNNING).
local function reap_one(now, token, r)
  local jk = jkey(r.job)
  local f = fields(jk, 'gen', 'cancelled', 'delivery', 'max_stalls', 'lane')
  event(now, 'lease_lost', r.job, r.sched, r.attempt, token)
  local how = 'failed'
  local live = f.gen == r.gen and f.cancelled ~= '1'
  if live and f.delivery == 'at_most_once' then
    how = 'abandoned'
    event(now, 'abandoned', r.job, r.sched, r.attempt, 'lease lost')
  elseif live and r.stalls + 1 < tonumber(f.max_stalls) then
    push_retry(r.job, f.lane, r.gen, r.sched, r.attempt + 1, r.stalls + 1, now)
    how = 'released'
  elseif f.gen then
    dead_letter(now, r.job, r.sched, r.attempt, 'lease lost')
  end
  settle(now, r.job, how)
end

-- Reap up to 100 leases expired at `now` (one call stays short).
local function reap(now)
  for _, token in ipairs(redis.call('ZRANGEBYSCORE', P .. 'lease', '-inf', now, 'LIMIT', 0, 100)) do
    local r = running_of(token)
    drop_running(token)
    if r then reap_one(now, token, r) end
  end
end
