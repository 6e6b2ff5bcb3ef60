-- include/queues.lua: a lane's flow queues read (include/flow.lua says what they are):
-- the priorities it has, a queue's name and first member, and the turn order.
-- Provides: flow_levels, queue_of, head_of, before
-- Key families: levels:<lane>, due:<lane>, layout, turns:<level>

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
