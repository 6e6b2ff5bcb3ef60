#!lua flags=allow-oom
-- complete.lua: record the success of a claimed invocation. Token-checked: refused when
-- the token no longer owns the invocation or its lease has expired (a stale owner can
-- never commit). A resend of a commit that already happened answers "ok" again.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, lease, running, seq, wake, events, stats,
--   skips:<job_id>, dead:<job_id>, bf:<job_id>, layout
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id   ARGV[4] token   ARGV[5] result (JSON text, opaque)
-- Returns: "ok" | "lease_lost" | "not_found"

--@include core
--@include job
--@include events
--@include tokens
--@include settle

local job, token, result = ARGV[3], ARGV[4], ARGV[5]
if job == '' or token == '' then return redis.error_reply('ERR duetime bad-input token') end
local now = now_ms()
local r, code = take(now, job, token)
if not r then return code end
local jk = jkey(job)
redis.call('HINCRBY', jk, 'runs', 1)
redis.call('HSET', jk, 'last_result', result, 'last_error', '', 'last_token', token,
  'last_run', fmt(now))
event(now, 'succeeded', job, r.sched, r.attempt, '')
settle(now, job, 'succeeded')
return 'ok'
