#!lua flags=allow-oom
-- complete.lua: record the success of a claimed invocation. Token-checked: refused when
-- the token no longer owns the invocation or its lease has expired (a stale owner can
-- never commit). A resend of a commit that already happened answers "ok" again. Decide,
-- then write: the RUNNING entry and the job are checked before the first write; one that
-- does not parse is moved aside with this outcome (include/commit.lua), and a corrupt
-- namespace key stops the call before any write.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, lease, running, seq, wake, events, stats,
--   skips:<job_id>, dead:<job_id>, bf:<job_id>, quarantined, quarantined:<entry>, layout,
--   done:<state>, paused, runs:<job_id>, flow:held, flow:run, flow:wait:<key>,
--   flow:win:<key>, levels:<lane>, limits, turns:<level>, waits, results,
--   res:<invocation>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id   ARGV[4] token   ARGV[5] result (JSON text, opaque)
-- Returns: "ok" | "lease_lost" | "not_found" | "quarantined" (the invocation's RUNNING
--          entry or job did not parse: moved aside, the success in its record), or an
--          error reply "ERR duetime corrupt ..." (nothing written)

--@include core
--@include job
--@include events
--@include tokens
--@include settle
--@include commit
--@include history
--@include told

local job, token, result = ARGV[3], ARGV[4], ARGV[5]
if job == '' or token == '' then return redis.error_reply('ERR duetime bad-input token') end
local corrupt = commit_guard('succeeded')
if corrupt then return corrupt end
local now = now_ms()
local plan, bad = commit_plan(job, token, 'succeeded', owned(now, job, token))
if not plan then return bad end
if plan.q then return commit_aside(now, 'complete', plan) end
if plan.code then return commit_code(plan) end
drop_running(token)
local jk = jkey(job)
JOB.incr(jk, 'runs', 1)
redis.call('HSET', jk, 'last_result', result, 'last_error', '', 'last_token', token,
  'last_run', fmt(now))
event(now, 'succeeded', job, plan.r.sched, plan.r.attempt, '')
record_run(now, job, plan.f, plan.r, 'succeeded')
TOLD.ended(now, job, plan.r.sched, 'succeeded', result, plan.f)
settle(now, job, 'succeeded')
return 'ok'
