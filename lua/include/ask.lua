-- include/ask.lua: when a claimant should ask again (claim.lua's "next").
-- Provides: PASSED_RECHECK_MS, next_due, ask_next
-- Key families: layout, due:<lane>, lease, levels:<lane>, turns:<level>, limits, flow:run,
--   flow:win:<key>, flow:held, flow:wait:<key>, wake

--@include core
--@include queues
--@include limits

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

-- When to ask again (include/ask.lua) for the lanes `left`: a flow lane's queues without
-- a key by their first member, its keyed queues by their turn, but for a key at its
-- concurrency (its turn "inf", or filled after its turn was set): a slot's end gives it back.
local function ask_next(now, left, passed, b)
  local queues, best = {}, nil
  local function open_turn(tk)  -- the earliest such turn of level `tk`, pages of 8
    for from = 0, math.huge, 8 do
      local got = redis.call('ZRANGE', tk, from, from + 7, 'WITHSCORES')
      if #got == 0 then return nil end
      for i = 1, #got, 2 do
        local t = tonumber(got[i + 1])
        if not t or t == math.huge then return nil end
        if got[i] ~= '' and select(2, flow_room(got[i], now, 1)) ~= 'concurrency' then return t end
      end
    end
  end
  for _, lane in ipairs(left) do
    for _, p in ipairs(b.flows[lane] or {}) do
      queues[#queues + 1] = queue_of(lane, p, '')
      local t = open_turn(P .. 'turns:' .. lane .. US .. fmt(p))
      if t and (not best or t < best) then best = t end
    end
    if not b.flows[lane] then queues[#queues + 1] = lane end
  end
  local nxt = next_due(now, queues, passed)
  if best and (nxt < 0 or best < nxt) then nxt = best end
  return nxt
end
