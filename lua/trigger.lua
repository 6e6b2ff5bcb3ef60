#!lua
-- trigger.lua: run a live job once now, outside its schedule (recorded as "triggered").
-- A recurring job gets an extra invocation, scheduled now; its schedule does not move and
-- the misfire policy does not apply. A one-off job's pending run is brought forward to
-- now (it runs once, never twice); one that is paused, running or waiting for a retry
-- has no run to bring forward.
-- Decide, then write: the job's key type and fields are checked first; a job whose data
-- does not parse is moved aside (the quarantine, include/aside.lua), and a corrupt
-- namespace key stops the call before any write.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, seq, wake, events, stats, quarantined,
--   quarantined:<entry>, layout, parked, parked:<task>, replica:<owner>, tasks,
--   levels:<lane>, turns:<level>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id
-- Returns: 1 if a run was added (or brought forward), 0 if the job is unknown, finished or
--          cancelled (or was moved aside: it did not parse), or a one-off with no run to
--          bring forward; or an error reply "ERR duetime corrupt ..."

--@include core
--@include events
--@include due
--@include check
--@include aside
--@include park
--@include flow

local job = ARGV[3]
if job == '' then return redis.error_reply('ERR duetime bad-input id') end
local corrupt = aside_ok() or seq_ok() or events_ok('triggered', 'quarantined')
if corrupt then return corrupt end
local now = now_ms()
local f, why, t = read_job(job, {'gen', 'def', 'cancelled', 'state', 'lane', 'retries', 'kind',
  'e', 'paused', 'stash', 'reruns'})
if why then
  move_aside(now, 'trigger', {id = job, job = job, reason = why, type = t})
  return 0
end
if not f or f.cancelled == '1' or (f.state and f.state ~= '') then return 0 end
corrupt = lane_ok(f.lane)
if corrupt then return corrupt end
if f.kind ~= 'every' and f.kind ~= 'cron' then  -- a one-off: brought forward, never doubled
  local member = f.paused ~= '1' and JOB.member(job, f.e)
  local due, waiting = P .. 'due:' .. f.lane, member and parked_key(f.def)
  local key = member and ((redis.call('ZSCORE', due, member) and due) or
    (waiting and redis.call('ZSCORE', waiting, member) and waiting))
  if not key then return 0 end                      -- in its lane, or waiting for a replica
  if key == due then due_add(f.lane, now, member, true) else redis.call('ZADD', key, 'XX', now, member) end
  JOB.set(jkey(job), 'next', fmt(now))
  if key == due then wake_if_head(f.lane, member, now) end
  event(now, 'triggered', job, now, 1, 'brought forward')
  return 1
end
push_retry(job, f.lane, f.gen, now, 1, 0, now)
event(now, 'triggered', job, now, 1, '')
return 1
