#!lua flags=allow-oom
-- release.lua: hand a claimed but unstarted invocation back at once, same attempt (used
-- by a shutting-down replica so nobody waits for its lease). Token-checked.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, lease, running, seq, wake, events, stats,
--   skips:<job_id>, dead:<job_id>, bf:<job_id>, layout
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id   ARGV[4] token
-- Returns: "ok" | "lease_lost" | "not_found"

--@include core
--@include job
--@include events
--@include tokens
--@include due
--@include settle

local job, token = ARGV[3], ARGV[4]
if job == '' or token == '' then return redis.error_reply('ERR duetime bad-input token') end
local now = now_ms()
local r, code = take(now, job, token)
if not r then return code end
local jk = jkey(job)
redis.call('HSET', jk, 'last_token', token)
local f = fields(jk, 'gen', 'cancelled', 'lane')
event(now, 'released', job, r.sched, r.attempt, '')
if f.gen == r.gen and f.cancelled ~= '1' then
  push_retry(job, f.lane, r.gen, r.sched, r.attempt, r.stalls, r.sched)
end
settle(now, job, 'released')
return 'ok'
