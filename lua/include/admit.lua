-- include/admit.lua: admission of an inspected due member (include/inspect.lua; already
-- removed from its due set) at claim time. A member or job whose data does not parse is
-- moved aside (include/aside.lua); one of a gone, cancelled or replaced job is dropped; a
-- paused job's is stashed in its hash; a retry or a one-off becomes a claim; a series
-- occurrence follows the misfire policy (include/fixed_rate.lua, include/calendar.lua),
-- then the overlap policy if an invocation of the job runs.
-- Provides: stash, overlap, series_due, early, admit
-- Key families: layout, job:<job_id>, events, stats, quarantined, quarantined:<entry>,
--   skips:<job_id>, fence, running, lease, due:<lane>, seq, wake, levels:<lane>,
--   turns:<level>

--@include core
--@include job
--@include skips
--@include aside
--@include issue
--@include calendar
--@include fixed_rate
--@include reruns
--@include flow

-- Keep the due member of a paused job in its hash (resume.lua puts it back), scored by
-- its occurrence (`kind` 's') or by now (a retry, whose count it keeps).
local function stash(now, jk, kind, pending, member, stashed)
  local score = kind == 's' and tonumber(pending) or now
  redis.call('HSET', jk, 'stash', (stashed or '') .. fmt(score) .. ' ' .. member .. '\n')
  if kind == 'r' then JOB.incr(jk, 'retries', 1) end
end

-- Occurrence `run` of a series whose previous invocation still runs: queue it (overlap
-- 'queue', one at most) or record it as skipped.
local function overlap(now, job, f, run)
  if f.overlap == 'queue' and (not f.queued or f.queued == '') then
    JOB.set(jkey(job), 'queued', fmt(run) .. '|')
  else
    local why = f.overlap == 'skip' and 'overlap' or 'overlap-queue-full'
    record_skip_at(now, job, run, run, 1, why, f)
  end
end

-- The due occurrence of series `job`: its next one becomes pending; returns the
-- occurrence to run now (ms), or nil.
local function series_due(b, job, lane, f)
  JOB.set(jkey(job), 'e', '')
  local busy = tonumber(f.running) > 0 and f.overlap ~= 'allow'
  local window = int(f.window or '')
  local run
  if f.kind == 'cron' then
    run = cron_due(b, job, lane, f, busy, window)
  else
    run = every_due(b.now, job, lane, f, busy, window)
  end
  if run and busy then
    overlap(b.now, job, f, run)
    return nil
  end
  return run
end

-- A due occurrence whose job's pending time (`next`, the number `due`) is still ahead: its
-- entry was scored early (garbage written by hand). Scored at that time again, and true:
-- never run early.
local function early(b, lane, x, due)
  if x.m.kind ~= 's' or not due or due <= b.now then return false end
  due_add(lane, due, x.member)
  event(b.now, 'requeued', x.m.job, due, nil,
    'claim: its due entry was scored ' .. fmt(x.score) .. ', before its next run')
  return true
end

-- Decide about inspected due member `x` of `lane` for claim batch `b`; true if it became
-- a claim, or a calendar series sent to be planned (its run comes in the call's next claim).
local function admit(b, lane, x)
  if x.bad then
    local q = x.bad
    q.member, q.lane, q.score, q.running, q.token = x.member, lane, x.score, '', ''
    move_aside(b.now, 'claim', q)
    return false
  end
  local m, f = x.m, x.f
  local job, jk = m.job, jkey(m.job)
  if not f or f.cancelled == '1' then return false end              -- gone or cancelled
  if m.kind == 's' and f.e ~= m.seq then return false end           -- replaced: stale
  if m.kind == 'r' and f.gen ~= m.gen then return false end         -- old generation
  if m.kind == 'r' then drop_rerun(jk, f, x) end                   -- no longer waits
  if f.paused == '1' then                                           -- paused: stash it
    stash(b.now, jk, m.kind, f.next, x.member, f.stash)
    return false
  end
  local pending = tonumber(f.next)  -- parsed once: a one-off's claim runs it
  if early(b, lane, x, pending) then return false end
  local since = (m.ready or 0) > 0 and m.ready or ((f.ready or '') ~= '' and tonumber(f.ready)) or 0
  b.ready = since > x.score and since or x.score  -- claimable from: due, or enqueued/resumed
  if m.kind == 'r' then
    issue(b, job, jk, f, m.gen, m.sched, m.attempt, m.stalls)
    b.issued[job] = 'r'  -- a re-run: the job's occurrences in this call wait (defers)
    if f.kind == 'every' or f.kind == 'cron' then  -- and in a later call of this claim
      redis.call('HSET', jk, 'rerun', fmt(b.fence))
    end
    return true
  end
  if f.kind ~= 'every' and f.kind ~= 'cron' then
    issue(b, job, jk, f, f.gen, pending, 1, 0, 'e', '')
    return true
  end
  local run = series_due(b, job, lane, f)
  if not run then return b.waits == job end  -- sent to be planned: it takes a place
  b.ready = math.max(run, since)
  issue(b, job, jk, f, f.gen, run, 1, 0)
  b.issued[job] = true  -- its series' next occurrence in this call waits (defers)
  return true
end
