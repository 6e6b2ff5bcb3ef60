-- include/replace.lua: add.lua's view of the job an add may replace, read and checked
-- (include/check.lua) before the first write. An existing job whose data does not parse
-- is to be moved aside, then the new one is created; unless quarantined:<job> already
-- holds an earlier item: then the add is refused (nothing written) until an operator
-- restores or purges that item, so no raw data is ever overwritten.
-- Provides: OLD_FIELDS, read_old
-- Key families: layout, job:<job_id>, due:<lane>, quarantined:<entry>

--@include core
--@include check

local OLD_FIELDS = {'gen', 'def', 'cancelled', 'state', 'next', 'e', 'lane', 'running', 'reruns'}

-- The fields of `job` (an empty table if there is none), or nil and an error reply; and
-- what to record if it must be moved aside first.
local function read_old(job)
  -- most adds are of a new id: one EXISTS (no key, so no type to check) instead of the read
  if redis.call('EXISTS', jkey(job)) == 0 then return {} end
  local old, why, t = read_job(job, OLD_FIELDS)
  if why and redis.call('EXISTS', P .. 'quarantined:' .. job) == 1 then
    return nil, redis.error_reply('ERR duetime corrupt job:' .. job .. ' does not parse, and ' ..
      'quarantined:' .. job .. ' holds an earlier item: restore or purge that item first')
  end
  if old then
    local bad = expect(P .. 'due:' .. old.lane, 'zset')
    if bad then return nil, bad end
  end
  return old or {}, nil, why and {id = job, job = job, reason = why, type = t}
end
