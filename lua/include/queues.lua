-- include/queues.lua: a lane's flow queues read (include/flow.lua says what they are):
-- the priorities it has, a queue's name and first member, the turn order, and the queues
-- of a priority whose turn has come (their stale turns set right on the way).
-- Provides: flow_levels, queue_of, head_of, before, candidates
-- Key families: levels:<lane>, due:<lane>, turns:<level>, layout, turns:<level>

--@include core
--@include flow

-- The priorities of `lane`'s flow queues, highest first, 0 among them; nil if none.
local function flow_levels(lane)
  local got = redis.call('SMEMBERS', P .. 'levels:' .. lane)
  if #got == 0 then return nil end
  local seen, out = {[0] = true}, {0}
  for _, p in ipairs(got) do
    local n = tonumber(p)
    if n and not seen[n] then seen[n] = true; out[#out + 1] = n end
  end
  table.sort(out, function(a, b) return a > b end)
  return out
end

local function queue_of(lane, p, key)
  if p == 0 and key == '' then return lane end
  return lane .. US .. fmt(p) .. US .. key
end

local function head_of(q)  -- the score of queue q's first member, or nil
  local h = redis.call('ZRANGE', P .. 'due:' .. q, 0, 0, 'WITHSCORES')
  return h[2] and tonumber(h[2])
end

local function before(a, b)  -- (turn, key) order; keys by bytes (Lua's < follows a locale)
  if a[1] ~= b[1] then return a[1] < b[1] end
  local x, y = a[2], b[2]
  for i = 1, math.min(#x, #y) do
    local cx, cy = string.byte(x, i), string.byte(y, i)
    if cx ~= cy then return cx < cy end
  end
  return #x < #y
end

-- The queues of priority `p` in `lane` whose turn has come, in turn order: the one without
-- a key (if its first member is due) and at most `cap` keyed ones.
local function candidates(b, lane, p, cap, tk)
  local out, first = {}, head_of(queue_of(lane, p, ''))
  if first and first <= b.now then
    local turn = math.max(first, tonumber(redis.call('ZSCORE', tk, '')) or first)
    if turn <= b.now then out[1] = {turn, ''} end
  end
  -- keyed: the first `cap` whose first member is due (of at most cap * 4 + 16 turns read);
  -- one met empty loses its turn, one not due yet gets its first member's
  local n, got = 0, redis.call('ZRANGEBYSCORE', tk, '-inf', b.now, 'WITHSCORES', 'LIMIT', 0,
    cap * 4 + 16)
  for i = 1, #got, 2 do
    local key = got[i]
    if key ~= '' and n < cap then
      local h = head_of(queue_of(lane, p, key))
      if not h then
        redis.call('ZREM', tk, key)
      elseif h > b.now then
        redis.call('ZADD', tk, h, key)
      else
        n = n + 1
        out[#out + 1] = {tonumber(got[i + 1]), key}
      end
    end
  end
  table.sort(out, before)
  return out
end
