-- include/fixed_rate.lua: a due occurrence of a fixed-rate series, at claim time: the
-- misfire plan (include/grid.lua) decides what runs now, what is recorded as skipped and
-- which occurrence is pending next (written here, so a series is never lost or doubled).
-- Provides: record_skip, every_due
-- Key families: layout, job:<job_id>, due:<lane>, seq, wake, events, stats, skips:<job_id>,
--   levels:<lane>, turns:<level>

--@include core
--@include job
--@include due
--@include skips
--@include grid

-- Record occurrences first_k..last_k of the grid as skipped (`f`: the job's fields).
local function record_skip(now, job, anchor, iv, first_k, last_k, reason, f)
  record_skip_at(now, job, occ(anchor, iv, first_k), occ(anchor, iv, last_k),
    last_k - first_k + 1, reason, f)
end

-- The due occurrence k of fixed-rate series `job` (hash fields `f`; `busy`: one of its
-- invocations runs and overlap is not allowed): park it, or apply the misfire plan and
-- push the next occurrence. Returns the occurrence to run now (ms), or nil.
local function every_due(now, job, lane, f, busy, window)
  local k, anchor, iv, grace = tonumber(f.k), tonumber(f.anchor), interval_of(f.interval),
    tonumber(f.grace)
  if busy and f.misfire == 'catch_up' then  -- catch_up skips nothing: park the series
    JOB.set(jkey(job), 'queued', fmt(occ(anchor, iv, k)) .. '|' .. fmt(k))
    return nil
  end
  local run_k, next_k, skip_from, skip_to, reason =
    plan(anchor, iv, k, now, f.misfire, grace, window)
  if skip_from then record_skip(now, job, anchor, iv, skip_from, skip_to, reason, f) end
  push_series(job, lane, occ(anchor, iv, next_k), next_k)
  if run_k then return occ(anchor, iv, run_k) end
  return nil
end
