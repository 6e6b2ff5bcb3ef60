-- include/repair.lua: the reconciler's check of one job: what a crash or a past bug may
-- have left behind, re-checked and repaired inside the calling script.
-- Provides: running_jobs, REPAIR_FIELDS, recount, requeue_orphan, rescore, repair_job
-- Key families: layout, job:<job_id>, due:<lane>, seq, wake, running, lease, events, stats,
--   skips:<job_id>, dead:<job_id>, bf:<job_id>, quarantined, quarantined:<entry>,
--   done:<state>, paused, runs:<job_id>, parked, parked:<task>, replica:<owner>, tasks, flow:held,
--   flow:run, flow:wait:<key>, flow:win:<key>, levels:<lane>, limits, turns:<level>
--
-- Left alone (legitimate states): finished, cancelled or paused jobs (a paused job's
-- pending entries wait in its `stash`); a series parked by catch-up (`queued`) while an
-- invocation runs; a calendar series in `replan` (its entry is re-announced each second);
-- a job with retries pending (`retries` > 0: its retry entries are in its lane); a job
-- whose invocation runs (a RUNNING entry, with or without a lease).
-- Repaired: an orphan (a live job with no due entry, no retry, nothing running) is
-- queued again at its pending time, except a one-off at-most-once job whose invocation
-- was issued (`running` > 0 with no RUNNING entry): that one is recorded as abandoned
-- (docs/shared-mode.md, the delivery contract: never run twice); a `running` count that no RUNNING entry backs is
-- set right (a parked occurrence is then released). A job whose data does not parse is
-- moved aside (include/aside.lua, found by "reconcile"), as a claim would when it comes
-- due: an orphan that does not parse would never come due. So is a RUNNING entry that
-- does not parse and holds no lease (include/stray.lua): no reaper would ever meet it.
-- A due entry scored elsewhere than the job's pending time (garbage: a score of 1e300 never
-- comes due, one in the past ran the job early) is scored at that time again.

--@include job
--@include events
--@include due
--@include settle
--@include check
--@include aside
--@include tokens
--@include park
--@include flow

-- job id -> number of its RUNNING entries (one HVALS of the namespace's RUNNING hash; a
-- pass runs it, so it stays cheap: ~1 us an entry).
local function running_jobs()
  local n = {}
  for _, data in ipairs(redis.call('HVALS', P .. 'running')) do
    local job = running_job(data)
    if job then n[job] = (n[job] or 0) + 1 end
  end
  return n
end

local REPAIR_FIELDS = {'gen', 'state', 'cancelled', 'paused', 'kind', 'lane', 'e', 'next',
  'running', 'retries', 'queued', 'delivery', 'replan', 'def', 'anchor', 'interval', 'grace',
  'reruns'}

local function recount(now, job, jk, running, count, dry)
  local what = 'running count ' .. fmt(running) .. ' with ' .. fmt(count) .. ' running'
  if dry then return {what, 'none (dry run)'} end
  JOB.set(jk, 'running', fmt(count + 1))
  settle(now, job, 'released')                 -- releases a parked occurrence, if any
  return {what, 'recounted'}
end

-- A live job with no due entry, no retry and nothing running: queue it again at its
-- pending time (the next claim applies its misfire policy), or, a one-off at-most-once
-- job whose invocation was issued, record it as abandoned.
local function requeue_orphan(now, job, jk, f, running, due, dry)
  local one_off = f.kind ~= 'every' and f.kind ~= 'cron'
  if one_off and running > 0 and f.delivery == 'at_most_once' then
    if dry then return {'orphan (issued, at-most-once)', 'none (dry run)'} end
    JOB.set(jk, 'running', '0', 'e', '')
    event(now, 'abandoned', job, due, nil, 'reconciler: issued but never recorded running')
    retire(job, 'abandoned')
    return {'orphan (issued, at-most-once)', 'abandoned'}
  end
  if dry then return {'orphan: no due entry, nothing running', 'none (dry run)'} end
  if lane_ok(f.lane) then return {'orphan whose lane\'s due set is corrupt', 'reported'} end
  JOB.set(jk, 'running', '0')
  push_series(job, f.lane, due, 0)
  event(now, 'requeued', job, due, nil, 'reconciler: no due entry, nothing running')
  return {'orphan: no due entry, nothing running', 'requeued'}
end

-- The due entry `member` of `job`, scored `score` instead of its pending time `due`:
-- score it at `due` again (the claim would have run it early, or never).
local function rescore(now, job, f, member, score, due, dry)
  local what = 'due entry scored ' .. score .. ', not at its next run ' .. fmt(due)
  if dry then return {what, 'none (dry run)'} end
  due_add(f.lane, due, member, true)
  wake_if_head(f.lane, member, due)
  event(now, 'requeued', job, due, nil, 'reconciler: ' .. what)
  return {what, 'rescored'}
end

-- Check job `job` (its RUNNING entries counted in `counts`); repair unless `dry`.
-- Returns nil (healthy or left alone) or {what, did}.
local function repair_job(now, job, counts, dry)
  local jk = jkey(job)
  local f, why, kind = read_job(job, REPAIR_FIELDS)
  if why then
    if dry then return {why, 'none (dry run)'} end
    move_aside(now, 'reconcile', {id = job, job = job, reason = why, member = '', lane = '',
      type = kind, running = '', token = ''})
    return {why, 'moved aside'}
  end
  if not f or (f.state and f.state ~= '') or f.cancelled == '1' or f.paused == '1' then
    return nil
  end
  local running, retries, due = int(f.running), int(f.retries), int(f.next or '')
  if not due then return nil end  -- a job with nothing pending (a one-off between runs)
  local count = counts[job] or 0
  local member = JOB.member(job, f.e)
  local queued = f.queued and f.queued ~= ''
  local score = member and redis.call('ZSCORE', P .. 'due:' .. f.lane, member)
  local waiting = member and not score and parked_key(f.def)    -- for a replica with its task
  if waiting and redis.call('ZSCORE', waiting, member) then return nil end
  if not score and retries <= 0 and count == 0 and not queued then
    return requeue_orphan(now, job, jk, f, running, due, dry)
  end
  local early = score and tonumber(score) < due and due > now  -- else: due, in its place
  if score and (tonumber(score) > due or early) and f.replan ~= '1' then  -- replan: re-announced
    return rescore(now, job, f, member, score, due, dry)
  end
  if running > count then return recount(now, job, jk, running, count, dry) end
  return nil
end
