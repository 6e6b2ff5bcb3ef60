#!lua flags=allow-oom
-- cancel.lua: remove a job's pending and future invocations: the linearization point of
-- cancel/deschedule. After it, no invocation of the job can be claimed: its waiting
-- re-runs (`reruns`, include/reruns.lua) leave the due set with its occurrence (an
-- unlisted stale retry entry is dropped by claim.lua). A RUNNING invocation is not touched and may finish.
-- Decide, then write: the job's key type and fields are checked first; a job whose data
-- does not parse is moved aside (the quarantine, include/aside.lua), and a corrupt
-- namespace key stops the call before any write.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, events, stats, skips:<job_id>, dead:<job_id>,
--   bf:<job_id>, quarantined, quarantined:<entry>, layout, done:<state>, paused,
--   runs:<job_id>, parked:<task>, parked, seq, wake, tasks, replica:<owner>, levels:<lane>,
--   turns:<level>, waits, results,
--   res:<invocation>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id
-- Returns: 1 if that prevented at least one start, else 0 (also when the job was moved
--          aside: it did not parse); or an error reply "ERR duetime corrupt ..."

--@include core
--@include job
--@include events
--@include retire
--@include check
--@include aside
--@include park
--@include reruns
--@include told

local job = ARGV[3]
if job == '' then return redis.error_reply('ERR duetime bad-input id') end
local corrupt = aside_ok() or events_ok('cancelled', 'quarantined')
if corrupt then return corrupt end
local jk, now = jkey(job), now_ms()
local f, why, t = read_job(job, {'gen', 'def', 'cancelled', 'state', 'e', 'lane', 'retries',
  'stash', 'queued', 'running', 'reruns'})
if why then
  move_aside(now, 'cancel', {id = job, job = job, reason = why, type = t})
  return 0
end
if not f or f.cancelled == '1' or (f.state and f.state ~= '') then return 0 end
corrupt = expect(P .. 'due:' .. f.lane, 'zset')
if corrupt then return corrupt end
local prevented = 0
local member = JOB.member(job, f.e)
if member and (redis.call('ZREM', P .. 'due:' .. f.lane, member) == 1 or drop_parked(f.def, member)) then
  prevented = 1                                     -- due in its lane, or waiting for a replica
end
if tonumber(f.retries) > 0 or (f.stash and f.stash ~= '') or (f.queued and f.queued ~= '') then
  prevented = 1
end
take_reruns(f.lane, f.reruns, function(m) return drop_parked(f.def, m) end)
JOB.set(jk, 'cancelled', '1')
JOB.del(jk, 'e', 'retries', 'stash', 'queued', 'paused', 'reruns')
event(now, 'cancelled', job, nil, nil, '')
if tonumber(f.running) <= 0 then
  retire(job, 'cancelled')
  TOLD.ended(now, job, nil, 'cancelled', '', nil)
end
return prevented
