-- include/dead.lua: dead letters: an invocation given up on is recorded as an event and in
-- the job's list of its 20 most recent dead letters (JSON).
-- Provides: dead_letter
-- Key families: layout, events, stats, dead:<job_id>

--@include core
--@include events
--@include capped

local function dead_letter(now, job, sched, attempt, reason)
  event(now, 'dead_lettered', job, sched, attempt, reason)
  push_capped(P .. 'dead:' .. job,
    cjson.encode({at = now, sched = sched, attempt = attempt, reason = reason}), 20)
end
