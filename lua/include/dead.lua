-- include/dead.lua: dead letters: an invocation given up on is recorded as an event and in
-- the job's list of its 20 most recent dead letters (JSON); the job is listed in dead-jobs
-- (`duetime ls --state dead`, `retry --failed`), trimmed to a day, written with pcall (an
-- index: one of another type is skipped). The job's field `lists` = 1 says it has lists
-- to expire with it (complete_many reads it instead of asking EXISTS on every ack).
-- Provides: dead_problem, dead_letter
-- Key families: layout, job:<job_id>, events, stats, dead:<job_id>, dead-jobs

--@include core
--@include job
--@include events
--@include capped

-- Why `job`'s dead letters cannot be written (nil: they can), checked with the job.
local function dead_problem(job)
  local t = redis.call('TYPE', P .. 'dead:' .. job)['ok']
  if t ~= 'none' and t ~= 'list' then return 'dead:' .. job .. ' is a ' .. t .. ', not a list' end
  return nil
end

local function dead_letter(now, job, sched, attempt, reason)
  event(now, 'dead_lettered', job, sched, attempt, reason)
  JOB.set(jkey(job), 'lists', '1')
  push_capped(P .. 'dead:' .. job,
    cjson.encode({at = now, sched = sched, attempt = attempt, reason = reason}), 20)
  redis.pcall('ZADD', P .. 'dead-jobs', now, job)
  redis.pcall('ZREMRANGEBYSCORE', P .. 'dead-jobs', '-inf', now - 86400000)
end
