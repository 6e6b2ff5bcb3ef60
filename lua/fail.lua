#!lua flags=allow-oom
-- fail.lua: record the failure of a claimed invocation; retry it (attempt+1) after a
-- delay, or record it as failed and dead-lettered. Token-checked like complete.lua; a
-- resend answers "ok" again. A retry of a replaced or cancelled job is not scheduled.
-- An invocation an operator interrupted (ARGV[8] "1": cancel with interrupt, which
-- cancelled its job first) is no failure: no retry, no dead letter, its last error and
-- failure count untouched; one `interrupted` event, and its job settles as cancelled.
-- Decide, then write: the RUNNING entry, the job and its dead letters are checked before
-- the first write; one that does not parse is moved aside with this outcome
-- (include/commit.lua), and a corrupt namespace key stops the call before any write.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, lease, running, seq, wake, events, stats,
--   skips:<job_id>, dead:<job_id>, bf:<job_id>, quarantined, quarantined:<entry>, layout,
--   dead-jobs, done:<state>, paused, runs:<job_id>, flow:held, flow:run, flow:wait:<key>,
--   flow:win:<key>, levels:<lane>, limits, turns:<level>, waits, results,
--   res:<invocation>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id   ARGV[4] token   ARGV[5] error text   ARGV[6] retry in ms ("" = final)
-- ARGV[7] the error's traceback (optional; its last 8 KiB are kept as last_tb)
-- ARGV[8] "1": interrupted by an operator, ARGV[5] its detail (optional; with ARGV[6] "")
-- Returns: "ok" | "lease_lost" | "not_found" | "quarantined" (the invocation's RUNNING
--          entry or job did not parse: moved aside, the failure in its record), or an
--          error reply "ERR duetime corrupt ..." or "ERR duetime bad-input ..." (nothing
--          written)

--@include core
--@include job
--@include events
--@include tokens
--@include due
--@include dead
--@include settle
--@include commit
--@include history
--@include told

local job, token, err, retry = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local stop = ARGV[8] or ''
if job == '' or token == '' then return redis.error_reply('ERR duetime bad-input token') end
if retry ~= '' and not (int(retry) and int(retry) >= 0) then
  return redis.error_reply('ERR duetime bad-input retry')
end
if stop ~= '' and (stop ~= '1' or retry ~= '') then
  return redis.error_reply('ERR duetime bad-input interrupted')
end
local corrupt = commit_guard('retried', 'failed', 'dead_lettered', 'interrupted')
if corrupt then return corrupt end
local now = now_ms()
local outcome = stop == '1' and 'interrupted: ' or
  (retry ~= '' and 'failed (a retry was asked): ' or 'failed: ')
outcome = outcome .. string.sub(err, 1, 200)
local r, code, data = owned(now, job, token)
local plan, bad = commit_plan(job, token, outcome, r, code, data, dead_problem)
if not plan then return bad end
if plan.q then return commit_aside(now, 'fail', plan) end
if plan.code then return commit_code(plan) end
drop_running(token)
local jk, f = jkey(job), plan.f or {}
if stop == '1' then  -- an operator's stop, not a failure: no retry, no dead letter
  redis.call('HSET', jk, 'last_token', token, 'last_run', fmt(now))
  event(now, 'interrupted', job, r.sched, r.attempt, err)
  record_run(now, job, f, r, 'interrupted')
  TOLD.ended(now, job, r.sched, 'interrupted', err, f)
  settle(now, job, 'cancelled')
  return 'ok'
end
local tb = string.sub(ARGV[7] or '', -8192)
redis.call('HSET', jk, 'last_error', err, 'last_token', token, 'last_run', fmt(now), 'last_tb', tb)
local how = 'failed'
if retry ~= '' and f.gen == r.gen and f.cancelled ~= '1' then
  event(now, 'retried', job, r.sched, r.attempt, err)
  push_retry(job, f.lane, r.gen, r.sched, r.attempt + 1, r.stalls, now + int(retry))
  how = 'released'
  record_run(now, job, f, r, 'retried')
else
  JOB.incr(jk, 'failures', 1)
  event(now, 'failed', job, r.sched, r.attempt, err)
  dead_letter(now, job, r.sched, r.attempt, err)
  record_run(now, job, f, r, 'failed')
  TOLD.ended(now, job, r.sched, 'failed', err, f)
end
settle(now, job, how)
return 'ok'
