-- include/flow.lua: flow control's state (docs/flow-control.md; the rules:
-- scheduler/flow.py, the in-process twin: scheduler/stores/memory/flow.py). A job waits in
-- a queue: its lane's own due set, or "<lane>\31<priority>\31<key>" (its job hash's `lane`
-- field holds the queue). A flow queue's lane lists its priority in levels:<lane>; a keyed
-- queue has a turn in turns:<lane>\31<priority> (member: the key; score: when it may next
-- be served, never later than its first due member: ZADD LT on every push). Limits are
-- declared per key or pattern in `limits` ("<rate> <period ms> <concurrency>", 0: none);
-- per key: flow:run (invocations running), flow:win:<key> (its last starts, newest
-- first, at most `rate`), flow:wait:<key> (queues waiting for a slot); flow:held maps the
-- token of each running keyed invocation to its queue, so its end frees the right slot.
-- Provides: US, lane_of, due_add
-- Key families: levels:<lane>, turns:<level>, due:<lane>, layout

--@include core

local US = '\31'  -- never in a lane name (printable text)

-- A queue's lane; a flow queue's ("<lane>\31<priority>\31<key>") priority and key after it.
local function lane_of(queue)
  if not string.find(queue, US, 1, true) then return queue end  -- the lane's own due set
  local lane, p, key = string.match(queue, '^([^\31]*)\31(%-?%d+)\31(.*)$')
  if lane then return lane, p, key end
  return string.match(queue, '^([^\31]*)')
end

-- Put `member` in queue `q` at `score` ('XX': only if it is there); a flow queue's turn
-- is brought forward to it, and its lane knows the priority.
local function due_add(q, score, member, xx)
  if xx then
    redis.call('ZADD', P .. 'due:' .. q, 'XX', score, member)
  else
    redis.call('ZADD', P .. 'due:' .. q, score, member)
  end
  local lane, p, key = lane_of(q)
  if not p then return end
  redis.call('SADD', P .. 'levels:' .. lane, p)
  if key ~= '' then redis.call('ZADD', P .. 'turns:' .. lane .. US .. p, 'LT', score, key) end
end
