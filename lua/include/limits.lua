-- include/limits.lua: limits enforced where jobs are claimed (include/flow.lua says where
-- they are kept): which limit governs a key, whether it may start now, a start counted,
-- an end that frees a slot.
-- Provides: LIMITS, RATE_GUARD_MS, limit_of, flow_room, flow_started, HELD, flow_end
-- Key families: limits, flow:run, flow:held, flow:win:<key>, flow:wait:<key>, turns:<level>,
--   wake, due:<lane>, layout, levels:<lane>

--@include core
--@include flow

-- The limit that governs `key`: the key's own, else the longest declared pattern of its
-- ':'-separated prefixes ("eu:customer:*", then "eu:*"), else "*". {rate, period, conc}
-- (numbers, 0: none), or nil. Looked up once per key and call.
local LIMITS, RATE_GUARD_MS = {}, 40
local function limit_of(key)
  local got = LIMITS[key]
  if got ~= nil then return got or nil end
  local scopes, i = {key}, #key
  while i > 0 do
    if string.byte(key, i) == 58 then scopes[#scopes + 1] = string.sub(key, 1, i) .. '*' end
    i = i - 1
  end
  scopes[#scopes + 1] = '*'
  got = false
  for _, text in ipairs(redis.call('HMGET', P .. 'limits', unpack(scopes))) do
    local r, per, c = string.match(text or '', '^(%d+) (%d+) (%d+)$')
    if r then
      -- a claim counts for the period and RATE_GUARD_MS (scheduler/flow.py: its start follows)
      got = {rate = tonumber(r), period = tonumber(per) + RATE_GUARD_MS, conc = tonumber(c)}
      break
    end
  end
  LIMITS[key] = got
  return got or nil
end

-- How many invocations of `key` may start at `now`, up to `most` where a rate limits it
-- (math.huge: no limit); 0 and why: 'concurrency', or 'rate' and when one may (its oldest
-- counted start ages out). The window is read from its `most`-th oldest counted start on:
-- starts are newest first, so if that one is within the period, all before it are too.
local function flow_room(key, now, most)
  local lim, room = limit_of(key), math.huge
  if not lim then return room end
  if lim.conc > 0 then
    room = lim.conc - (tonumber(redis.call('HGET', P .. 'flow:run', key)) or 0)
    if room <= 0 then return 0, 'concurrency' end
  end
  if lim.rate > 0 then
    local m = math.min(most, lim.rate)
    local starts = redis.call('LRANGE', P .. 'flow:win:' .. key, lim.rate - m, lim.rate - 1)
    local left = m
    for _, t in ipairs(starts) do
      if (tonumber(t) or 0) + lim.period > now then left = left - 1 end
    end
    if left <= 0 then return 0, 'rate', tonumber(starts[#starts]) + lim.period end
    room = math.min(room, left)
  end
  return room
end

-- An invocation of `key`'s queue `q` was claimed at `now` under `token`.
local function flow_started(key, q, token, now)
  redis.call('HINCRBY', P .. 'flow:run', key, 1)
  redis.call('HSET', P .. 'flow:held', token, q)
  local lim = limit_of(key)
  if lim and lim.rate > 0 then
    local win = P .. 'flow:win:' .. key
    redis.call('LPUSH', win, fmt(now))
    redis.call('LTRIM', win, 0, lim.rate - 1)
    redis.call('PEXPIRE', win, lim.period)
  end
end

-- The invocation of `token` ended (or its lease was reaped): a keyed one frees its
-- key's slot, and the queues that waited for one (and its own) get a turn now. One EXISTS
-- per call where no keyed invocation runs.
local HELD
local function flow_end(token)
  if HELD == nil then HELD = redis.call('EXISTS', P .. 'flow:held') == 1 end
  if not HELD then return end
  local q = redis.call('HGET', P .. 'flow:held', token)
  if not q then return end
  redis.call('HDEL', P .. 'flow:held', token)
  local lane, p, key = string.match(q, '^(.-)\31(%-?%d+)\31(.*)$')
  if not key or key == '' then return end
  if redis.call('HINCRBY', P .. 'flow:run', key, -1) <= 0 then
    redis.call('HDEL', P .. 'flow:run', key)
  end
  local now, wait = now_ms(), P .. 'flow:wait:' .. key
  local waited = redis.call('SMEMBERS', wait)
  waited[#waited + 1] = q
  for _, w in ipairs(waited) do
    local l, wp = string.match(w, '^(.-)\31(%-?%d+)\31')
    if l then redis.call('ZADD', P .. 'turns:' .. l .. US .. wp, 'LT', now, key) end
  end
  if #waited > 1 then
    redis.call('DEL', wait)
    redis.call('PUBLISH', P .. 'wake', fmt(now))
  end
end
