-- include/admit.lua: admission of a due member (already removed from its due set) at
-- claim time. A malformed member is quarantined; one of a gone, cancelled or replaced
-- job is dropped; a paused job's is stashed in its hash; a retry or a one-off becomes a
-- claim; a series occurrence follows the misfire policy (include/fixed_rate.lua,
-- include/calendar.lua), then the overlap policy if an invocation of the job runs.
-- Provides: quarantine, stash, overlap, series_due, admit
-- Key families: layout, job:<job_id>, events, stats, quarantine, skips:<job_id>, fence,
--   running, lease, due:<lane>, seq, wake

--@include core
--@include job
--@include events
--@include capped
--@include due
--@include skips
--@include issue
--@include calendar
--@include fixed_rate

-- Move a malformed due member aside (the last 1000 are kept) and record it.
local function quarantine(now, member)
  event(now, 'quarantined', '', nil, nil, 'malformed due entry: ' .. member)
  push_capped(P .. 'quarantine', member, 1000)
end

-- Keep the due member of a paused job in its hash (resume.lua puts it back), scored by
-- its occurrence (`kind` 's') or by now (a retry, whose count it keeps).
local function stash(now, jk, kind, pending, member)
  local score = kind == 's' and tonumber(pending) or now
  redis.call('HSET', jk, 'stash', (redis.call('HGET', jk, 'stash') or '') ..
    fmt(score) .. ' ' .. member .. '\n')
  if kind == 'r' then redis.call('HINCRBY', jk, 'retries', 1) end
end

-- Occurrence `run` of a series whose previous invocation still runs: queue it (overlap
-- 'queue', one at most) or record it as skipped.
local function overlap(now, job, f, run)
  if f.overlap == 'queue' and (not f.queued or f.queued == '') then
    redis.call('HSET', jkey(job), 'queued', fmt(run) .. '|')
  else
    local why = f.overlap == 'skip' and 'overlap' or 'overlap-queue-full'
    record_skip_at(now, job, run, run, 1, why)
  end
end

-- The due occurrence of series `job`: its next one becomes pending; returns the
-- occurrence to run now (ms), or nil.
local function series_due(b, job, lane, f)
  redis.call('HSET', jkey(job), 'e', '')
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

-- Decide about due `member` of `lane` for claim batch `b`; true if it became a claim.
local function admit(b, lane, member)
  local m = parse_member(member)
  if not m then
    quarantine(b.now, member)
    return false
  end
  local job, jk = m.job, jkey(m.job)
  local f = fields(jk, 'gen', 'cancelled', 'e', 'paused', 'kind', 'def', 'running',
    'overlap', 'misfire', 'next', 'k', 'anchor', 'interval', 'grace', 'queued', 'window',
    'after', 'replan', 'go')
  if not f.gen or f.cancelled == '1' then return false end          -- gone or cancelled
  if m.kind == 's' and f.e ~= m.seq then return false end           -- replaced: stale
  if m.kind == 'r' and f.gen ~= m.gen then return false end         -- old generation
  if m.kind == 'r' then redis.call('HINCRBY', jk, 'retries', -1) end
  if f.paused == '1' then                                           -- paused: stash it
    stash(b.now, jk, m.kind, f.next, member)
    return false
  end
  local running = tonumber(f.running)
  if m.kind == 'r' then
    issue(b, job, running, m.gen, tonumber(m.sched), tonumber(m.attempt), tonumber(m.stalls),
      f.def)
    return true
  end
  if f.kind ~= 'every' and f.kind ~= 'cron' then
    issue(b, job, running, f.gen, tonumber(f.next), 1, 0, f.def, 'e', '')
    return true
  end
  local run = series_due(b, job, lane, f)
  if not run then return false end
  issue(b, job, running, f.gen, run, 1, 0, f.def)
  return true
end
