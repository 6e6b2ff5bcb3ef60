#!lua
-- pause.lua: stop claiming a job until resume.lua; its pending occurrence and its waiting
-- re-runs (`reruns`, include/reruns.lua) are moved out of the due set (or out of the jobs
-- waiting for a replica) into the job hash (`stash`); a re-run pushed while it is paused
-- goes there too (include/due.lua), so nothing of it is due or counted until resume.
-- Decide, then write: the job's key type and fields are checked first; a job whose data
-- does not parse is moved aside (the quarantine, include/aside.lua), and a corrupt
-- namespace key stops the call before any write.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, events, stats, quarantined, quarantined:<entry>,
--   layout, paused, parked, parked:<task>, replica:<owner>, seq, tasks, wake, levels:<lane>,
--   turns:<level>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id
-- Returns: 1 if the job was active and is now paused, else 0 (also when the job was
--          moved aside: it did not parse); or an error reply "ERR duetime corrupt ..."

--@include core
--@include job
--@include events
--@include check
--@include aside
--@include park
--@include reruns

local job = ARGV[3]
if job == '' then return redis.error_reply('ERR duetime bad-input id') end
local corrupt = aside_ok() or events_ok('paused', 'quarantined')
if corrupt then return corrupt end
local jk = jkey(job)
local f, why, t = read_job(job, {'gen', 'def', 'cancelled', 'state', 'e', 'lane', 'paused', 'next',
  'reruns'})
if why then
  move_aside(now_ms(), 'pause', {id = job, job = job, reason = why, type = t})
  return 0
end
if not f or f.cancelled == '1' or (f.state and f.state ~= '') or f.paused == '1' then
  return 0
end
corrupt = expect(P .. 'due:' .. f.lane, 'zset')
if corrupt then return corrupt end
local stash = ''
local member = JOB.member(job, f.e)
if member then
  redis.call('ZREM', P .. 'due:' .. f.lane, member)
  drop_parked(f.def, member)                        -- or it waited for a replica
  stash = f.next .. ' ' .. member .. '\n'
end
stash = stash .. take_reruns(f.lane, f.reruns, function(m) return drop_parked(f.def, m) end)
JOB.set(jk, 'paused', '1', 'stash', stash, 'e', '')
redis.call('HDEL', jk, 'reruns')
redis.pcall('SADD', P .. 'paused', job)  -- the listing index (derived: pcall)
event(now_ms(), 'paused', job, nil, nil, '')
return 1
