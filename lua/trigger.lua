#!lua
-- trigger.lua: run a live job once now, outside its schedule (recorded as "triggered").
-- The extra invocation's scheduled time is now; it does not move the job's schedule and
-- is not subject to its misfire policy.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, seq, wake, events, stats, layout
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id
-- Returns: 1 if a run was added, 0 if the job is unknown, finished or cancelled

--@include core
--@include job
--@include events
--@include due

local job = ARGV[3]
if job == '' then return redis.error_reply('ERR duetime bad-input id') end
local f = fields(jkey(job), 'def', 'cancelled', 'state', 'lane', 'gen')
if not f.def or f.cancelled == '1' or (f.state and f.state ~= '') then return 0 end
local now = now_ms()
push_retry(job, f.lane, f.gen, now, 1, 0, now)
event(now, 'triggered', job, now, 1, '')
return 1
