-- include/history.lua: a recurring job's recent runs, newest first, in the list
-- runs:<job_id> (its RUNS_KEPT last ends: "<sched>|<attempt>|<fence>|<started>|<ended>|
-- <outcome>", times in epoch ms, started empty when unknown), for the web console and
-- `Client`: the event stream is capped and short. One-off jobs keep none (their hash holds
-- their one run). The claim of a recurring job writes the job field `started` =
-- "<fence>@<now>" in the HSET it makes anyway (a one-off's claim does not); the end reads
-- it with the job's other fields. Derived data, written
-- with pcall: a key of another type is skipped, never a reason to refuse the outcome.
-- Provides: RUNS_KEPT, record_run
-- Key families: layout, runs:<job_id>

--@include core

local RUNS_KEPT = 20

-- Invocation `r` (its RUNNING entry) of `job` (checked fields `f`) ended at `now` as
-- `outcome` (succeeded, failed, retried, interrupted, lease_lost).
local function record_run(now, job, f, r, outcome)
  if not f or (f.kind ~= 'every' and f.kind ~= 'cron') then return end
  local fence, at = string.match(f.started or '', '^(%d+)@(%d+)$')
  local started = (fence and tonumber(fence) == r.fence) and at or ''
  local k = P .. 'runs:' .. job
  redis.pcall('LPUSH', k, fmt(r.sched) .. '|' .. fmt(r.attempt) .. '|' .. fmt(r.fence) .. '|' ..
    started .. '|' .. fmt(now) .. '|' .. outcome)
  redis.pcall('LTRIM', k, 0, RUNS_KEPT - 1)
end
