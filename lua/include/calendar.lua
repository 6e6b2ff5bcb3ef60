-- include/calendar.lua: a due occurrence of a calendar (cron) series, at claim time. Lua
-- cannot evaluate a cron expression in a time zone, so the job hash carries the pending
-- occurrence `next` and the one after it, `after`, both computed by replicas. A due
-- occurrence whose fate is clear from these two (on time; or the only due one) is
-- claimed or skipped here and `after` becomes pending; the caller then computes the new
-- `after` (plan.lua). Otherwise (several missed, or `after` not known yet) the job waits
-- in state `replan`, re-announced every second, until a replica applies the misfire
-- policy in Python and writes the result.
-- Provides: cron_step, ask_plan, plan_records, wait_for_plan, cron_due
-- Key families: layout, job:<job_id>, due:<lane>, seq, wake, events, stats, skips:<job_id>,
--   levels:<lane>, turns:<level>

--@include core
--@include job
--@include due
--@include skips
--@include flow

-- Can occurrence t be decided at `now` from t and `after` alone? Returns decided, and
-- the reason to record t as skipped (nil: run it).
local function cron_step(f, t, now, window)
  if f.replan == '1' then return false end
  local after = int(f.after or '')
  if not after then return false end
  if f.go == '1' then return true, nil end  -- a replica decided: run it
  local grace, why = tonumber(f.grace), 'misfire'
  if grace < 0 then grace = math.min(after - t, 60000) end
  if f.misfire == 'catch_up' then
    if not window or t >= now - window then return true, nil end
    grace, why = window, 'catch-up-window'
  end
  if t >= now - grace then return true, nil end
  if after <= now then return false end  -- several due and missed: the policy decides
  if f.misfire == 'run_once' then return true, nil end
  return true, why
end

-- Ask the caller to plan calendar series `job` (the reply's plans, include/issue.lua),
-- noting how many claims batch `b` made before it: its place among them.
local function ask_plan(b, job)
  b.plans[#b.plans + 1] = job
  b.plan_at[#b.plans] = b.n
end

-- Append the reply's plan records of batch `b` to `parts`: "<job bytes> <at>\n<job>" each.
local function plan_records(b, parts)
  for i, job in ipairs(b.plans) do
    parts[#parts + 1] = fmt(#job) .. ' ' .. fmt(b.plan_at[i]) .. '\n' .. job
  end
end

-- Keep a calendar series waiting for a replica's plan: re-announced every second.
-- `b`: the claim batch (include/issue.lua), whose `plans` the reply lists.
-- It keeps its sequence number `seq`: its plan's occurrence keeps its place (plan.lua).
local function wait_for_plan(b, job, lane, seq)
  due_add(lane, b.now + 1000, seq .. '|s|' .. job)
  JOB.set(jkey(job), 'e', seq)
  ask_plan(b, job)
  b.waits = job  -- it takes its lane's place in this call, as the run it will make
end

-- The due occurrence `next` of calendar series `job` (hash fields `f`; `busy`: one of
-- its invocations runs and overlap is not allowed): park it, skip it, or leave it to a
-- replica's plan. Returns the occurrence to run now (ms), or nil.
local function cron_due(b, job, lane, f, busy, window)
  local jk, t = jkey(job), tonumber(f.next)
  if busy and f.misfire == 'catch_up' then  -- catch_up skips nothing: park the series
    JOB.set(jk, 'queued', fmt(t) .. '|0')
    return nil
  end
  local decided, skip = cron_step(f, t, b.now, window)
  if not decided then                       -- a replica must apply the policy
    redis.call('HSET', jk, 'replan', '1')
    wait_for_plan(b, job, lane, f.e)
    return nil
  end
  local run
  if skip then record_skip_at(b.now, job, t, t, 1, skip, f) else run = t end
  redis.call('HSET', jk, 'after', '', 'go', '')
  push_series(job, lane, tonumber(f.after), 0)
  ask_plan(b, job)
  return run
end
