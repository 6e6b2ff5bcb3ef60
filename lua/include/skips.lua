-- include/skips.lua: skipped occurrences: a range of them is recorded as one event and in
-- the job's list of its 20 most recent skipped ranges ("first|last|count|reason"); the
-- job's field `lists` = 1 says it has lists to expire with it (include/dead.lua). The
-- skips no run was told of yet are summed in the job's field `sk` ("first|last|count|
-- reasons", the reasons distinct, comma-separated): the job's next claim takes them
-- (include/issue.lua; a tracing replica makes them an event of that run's span).
-- Provides: skips_problem, unreported_with, record_skip_at
-- Key families: layout, job:<job_id>, events, stats, skips:<job_id>

--@include core
--@include job
--@include events
--@include capped

-- Why `job`'s list of skipped ranges cannot be written (nil: it can), checked with the job.
local function skips_problem(job)
  local t = redis.call('TYPE', P .. 'skips:' .. job)['ok']
  if t ~= 'none' and t ~= 'list' then return 'skips:' .. job .. ' is a ' .. t .. ', not a list' end
  return nil
end

-- The summary `sk` of skips not told to a run, `old` ("" or nil: none) with a range added;
-- a summary that does not parse (a hand edit: a claim moves such a job aside) starts anew.
local function unreported_with(old, first, last, count, reason)
  local f, l, n, why = string.match(old or '', '^(%d+)|(%d+)|(%d+)|([%a,%-]+)$')
  if f then
    first, last, count = math.min(first, tonumber(f)), math.max(last, tonumber(l)), count + tonumber(n)
    if not string.find(',' .. why .. ',', ',' .. reason .. ',', 1, true) then
      reason = why .. ',' .. reason
    else
      reason = why
    end
  end
  return fmt(first) .. '|' .. fmt(last) .. '|' .. fmt(count) .. '|' .. reason
end

-- Record occurrences first..last (`count` of them) of `job` as skipped for `reason`;
-- `f` (the job's fields, if the caller holds them) gets the new summary `sk`.
local function record_skip_at(now, job, first, last, count, reason, f)
  event(now, 'skipped', job, first, nil, fmt(count) .. ' occurrence(s): ' .. reason)
  local jk = jkey(job)
  local sk = unreported_with(redis.call('HGET', jk, 'sk'), first, last, count, reason)
  JOB.set(jk, 'lists', '1', 'sk', sk)
  if f then f.sk = sk end
  push_capped(P .. 'skips:' .. job, fmt(first) .. '|' .. fmt(last) .. '|' .. fmt(count) ..
    '|' .. reason, 20)
end
