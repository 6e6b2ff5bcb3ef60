-- include/skips.lua: skipped occurrences: a range of them is recorded as one event and in
-- the job's list of its 20 most recent skipped ranges ("first|last|count|reason"); the
-- job's field `lists` = 1 says it has lists to expire with it (include/dead.lua).
-- Provides: skips_problem, record_skip_at
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

local function record_skip_at(now, job, first, last, count, reason)
  event(now, 'skipped', job, first, nil, fmt(count) .. ' occurrence(s): ' .. reason)
  redis.call('HSET', jkey(job), 'lists', '1')
  push_capped(P .. 'skips:' .. job, fmt(first) .. '|' .. fmt(last) .. '|' .. fmt(count) ..
    '|' .. reason, 20)
end
