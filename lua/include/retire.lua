-- include/retire.lua: retire a finished or cancelled job: its state is recorded and its
-- hash and lists expire after a day (finished jobs stay inspectable that long), and it is
-- listed in done:<state> (`duetime ls --state`), trimmed to that day.
-- Provides: RETENTION_MS, retire
-- Key families: layout, job:<job_id>, skips:<job_id>, dead:<job_id>, bf:<job_id>,
--   done:<state>, paused, runs:<job_id>

--@include core
--@include job

local RETENTION_MS = 86400000

local function retire(job, outcome)
  local jk = jkey(job)
  redis.call('HSET', jk, 'state', outcome)
  redis.call('PEXPIRE', jk, RETENTION_MS)
  redis.call('PEXPIRE', P .. 'skips:' .. job, RETENTION_MS)
  redis.call('PEXPIRE', P .. 'dead:' .. job, RETENTION_MS)
  redis.call('PEXPIRE', P .. 'bf:' .. job, RETENTION_MS)
  redis.call('PEXPIRE', P .. 'runs:' .. job, RETENTION_MS)
  -- The listing indexes are derived data, written with pcall: one of another type is
  -- skipped, never a reason to stop a retirement (a listing re-reads every job it names).
  local now, done = now_ms(), P .. 'done:' .. outcome
  redis.pcall('ZADD', done, now, job)
  redis.pcall('ZREMRANGEBYSCORE', done, '-inf', now - RETENTION_MS)
  redis.pcall('SREM', P .. 'paused', job)
end
