-- include/retire.lua: retire a finished or cancelled job: its state is recorded and its
-- hash and lists expire after a day, or its `keep` (its result_ttl: docs/results.md), and
-- it is listed in done:<state> (`duetime ls --state`), trimmed to a day.
-- The live count (include/events.lua) drops by one per job retired here.
-- Provides: RETENTION_MS, RETENTION, list_done, retire, retire_success
-- Key families: layout, events, stats, job:<job_id>, skips:<job_id>, dead:<job_id>, bf:<job_id>,
--   done:<state>, paused, runs:<job_id>

--@include core
--@include job
--@include events
--@include rules
--@include plain

JOB.KEEP_READ = {'keep'}  -- retire's

local RETENTION_MS = 86400000
local RETENTION = '86400000'  -- PEXPIRE's argument as text: a Lua number is formatted per call

-- List jobs retired at `now` as `outcome` in done:<outcome> (`scored`: score, job pairs)
-- and trim it to the day finished jobs are kept; `ended` of them (default: all) were live.
local function list_done(now, outcome, scored, ended)
  if #scored == 0 then return end
  count_live(-(ended or #scored / 2))
  local done = P .. 'done:' .. outcome
  redis.pcall('ZADD', done, unpack(scored))
  redis.pcall('ZREMRANGEBYSCORE', done, '-inf', now - RETENTION_MS)
end

local function retire(job, outcome)
  local jk = jkey(job)
  local ended = redis.call('HSET', jk, 'state', outcome)  -- 1: it had no state, it was live
  JOB.del(jk, 'paused', 'stash')  -- paused while its last run ran: it ended
  local keep = (JOB.hmget(jk, JOB.KEEP_READ, redis.call) or {})[1]
  if not RULE.keep(keep) then keep = RETENTION end
  redis.call('PEXPIRE', jk, keep)
  redis.call('PEXPIRE', P .. 'skips:' .. job, keep)
  redis.call('PEXPIRE', P .. 'dead:' .. job, keep)
  redis.call('PEXPIRE', P .. 'bf:' .. job, keep)
  redis.call('PEXPIRE', P .. 'runs:' .. job, keep)
  -- The listing indexes are derived data, written with pcall: one of another type is
  -- skipped, never a reason to stop a retirement (a listing re-reads every job it names).
  local now = now_ms()
  list_done(now, outcome, {now, job}, ended)
  redis.pcall('SREM', P .. 'paused', job)
end

-- The common case of a success (complete_many.lua): a one-off job's only invocation ended
-- (its checked fields `f` say so: not paused, nothing queued or pending), so the job
-- (key `jk`) retires with one HSET that records the outcome too; the caller lists it
-- (list_done).
local function retire_success(now_s, jk, job, token, result, f)
  local plan = JOB.plain[jk]
  if plan and plan.f == f then  -- read the plain way
    redis.call('HSET', jk, 'st', PLAIN.succeeded(plan), 'last_result', result, 'last_error', '',
      'last_token', token, 'last_run', now_s, 'state', 'succeeded')
    JOB.forget(jk)
  else
    JOB.set(jk, 'runs', fmt((tonumber(f.runs) or 0) + 1), 'running', '0', 'last_result', result,
      'last_error', '', 'last_token', token, 'last_run', now_s, 'state', 'succeeded')
  end
  local keep = RULE.keep(f.keep) and f.keep or RETENTION
  redis.call('PEXPIRE', jk, keep)
  -- lists to expire: flagged (include/dead.lua), or an older version's dead letter
  if f.lists == '1' or (tonumber(f.failures) or 0) > 0 then
    redis.call('PEXPIRE', P .. 'skips:' .. job, keep)
    redis.call('PEXPIRE', P .. 'dead:' .. job, keep)
  end
end
