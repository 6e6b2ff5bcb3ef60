-- include/settle.lua: what follows the end of an invocation: a queued occurrence of the
-- job is released, or a finished one-off or cancelled job is retired.
-- Provides: settle
-- Key families: layout, events, stats, job:<job_id>, due:<lane>, seq, wake, skips:<job_id>,
--   dead:<job_id>, bf:<job_id>, done:<state>, paused, runs:<job_id>, levels:<lane>,
--   turns:<level>

--@include job
--@include due
--@include retire

-- After an invocation of `job` ended (`how`: succeeded, failed, released, abandoned):
-- release a queued occurrence, or retire a finished one-off or cancelled job.
local function settle(now, job, how)
  local jk = jkey(job)
  if redis.call('EXISTS', jk) == 0 then return end
  local left = JOB.incr(jk, 'running', -1)
  if left > 0 then  -- another runs: how this one ended is the outcome if a hand-back ends last
    if how ~= 'released' then redis.call('HSET', jk, 'ended', how) end
    return
  end
  if left < 0 then JOB.set(jk, 'running', '0') end  -- never below 0
  local f = JOB.fields(jk, 'queued', 'cancelled', 'paused', 'kind', 'e', 'retries', 'lane', 'gen',
    'stash', 'ended')
  local outcome = how ~= 'released' and how or f.ended  -- a hand-back is no outcome
  local queued, cancelled, paused, kind = f.queued, f.cancelled, f.paused, f.kind
  if queued and queued ~= '' and cancelled ~= '1' and paused ~= '1' then
    JOB.set(jk, 'queued', '')
    local sched, k = string.match(queued, '^(%d+)|(%-?%d*)$')
    if k ~= '' then
      push_series(job, f.lane, tonumber(sched), tonumber(k))  -- a parked catch-up series
    else
      push_retry(job, f.lane, f.gen, tonumber(sched), 1, 0, tonumber(sched))
    end
    return
  end
  if cancelled == '1' then
    retire(job, 'cancelled')
  elseif kind ~= 'every' and kind ~= 'cron' and (not f.e or f.e == '') and tonumber(f.retries) <= 0
      and (paused ~= '1' or (f.stash or '') == '') and outcome and outcome ~= '' then
    retire(job, outcome)  -- a one-off paused while it ran has nothing stashed: it ends too
  end
end
