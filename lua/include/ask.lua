-- include/ask.lua: when a claimant should ask again (claim.lua's "next").
-- Provides: PASSED_RECHECK_MS, next_due
-- Key families: layout, due:<lane>, lease

--@include core

-- Due members of tasks the claimant lacks, left for the replicas that serve them, are not
-- a reason to ask again at once; due members the budget of one call did not reach are,
-- within this.
local PASSED_RECHECK_MS = 1000

-- At `now`: the earliest head of `lanes` (those with capacity left) or lease expiry; -1 for
-- none. In a lane where members were passed over (`passed[lane]`, include/inspect.lua): its
-- first member due after now, and at most PASSED_RECHECK_MS ahead when it is 'more'.
local function next_due(now, lanes, passed)
  local nxt = -1
  for _, lane in ipairs(lanes) do
    local head
    if passed[lane] then
      head = redis.call('ZRANGEBYSCORE', P .. 'due:' .. lane, '(' .. fmt(now), '+inf',
        'WITHSCORES', 'LIMIT', 0, 1)
      local recheck = now + PASSED_RECHECK_MS
      if passed[lane] == 'more' and not (head[2] and tonumber(head[2]) < recheck) then
        head = {'', fmt(recheck)}
      end
    else
      head = redis.call('ZRANGE', P .. 'due:' .. lane, 0, 0, 'WITHSCORES')
    end
    if head[2] and (nxt < 0 or tonumber(head[2]) < nxt) then nxt = tonumber(head[2]) end
  end
  local lh = redis.call('ZRANGE', P .. 'lease', 0, 0, 'WITHSCORES')
  if lh[2] and (nxt < 0 or tonumber(lh[2]) < nxt) then nxt = tonumber(lh[2]) end
  return nxt
end
