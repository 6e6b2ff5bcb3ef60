-- include/limits.lua: limits enforced where jobs are claimed (kept: include/flow.lua): which
-- limit governs a key, whether it may start now, starts counted, ends that free slots.
-- Provides: RATE_GUARD_MS, LIMITS, HELD, limit_of, flow_room, flow_started, flow_end_many
-- Key families: limits, flow:run, flow:held, flow:win:<key>, flow:wait:<key>, turns:<level>,
--   wake, due:<lane>, layout, levels:<lane>

--@include core
--@include flow

-- The limit that governs `key`: the key's own, else the longest declared pattern of its
-- ':'-separated prefixes ("eu:customer:*", then "eu:*"), else "*". {rate, period, conc}
-- (numbers, 0: none), or nil. Looked up once per key and call.
local RATE_GUARD_MS = 40
--@call
local LIMITS, HELD = {}, nil  -- HELD: asked once a call (flow_end_many)
--@end
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

-- Invocations of `key`'s queue `q` were claimed at `now` under `tokens`: counted, tokens
-- and (under a rate) starts written once for the batch. Whether a rate counted them.
local function flow_started(key, q, tokens, now)
  local n = #tokens
  if n == 0 then return false end
  redis.call('HINCRBY', P .. 'flow:run', key, n)
  local held = {}
  for i, token in ipairs(tokens) do held[2 * i - 1], held[2 * i] = token, q end
  redis.call('HSET', P .. 'flow:held', unpack(held))
  local lim = limit_of(key)
  if lim and lim.rate > 0 then
    local win, starts = P .. 'flow:win:' .. key, {}
    for i = 1, math.min(n, lim.rate) do starts[i] = fmt(now) end
    redis.call('LPUSH', win, unpack(starts))
    redis.call('LTRIM', win, 0, lim.rate - 1)
    redis.call('PEXPIRE', win, lim.period)
    return true
  end
  return false
end

-- The invocations of `tokens` ended (or their leases were reaped): each keyed one frees
-- its key's slot (flow_freed, once per key). One EXISTS per call where none runs.
local function flow_end_many(tokens)
  if HELD == nil then HELD = redis.call('EXISTS', P .. 'flow:held') == 1 end
  if not HELD or #tokens == 0 then return end
  -- `ended.n` runs of `key` ended (in queues `ended.qs`): slots free, the waiting get a turn.
  local function flow_freed(key, ended)
    if redis.call('HINCRBY', P .. 'flow:run', key, -ended.n) <= 0 then
      redis.call('HDEL', P .. 'flow:run', key)
    end
    local now, wait = now_ms(), P .. 'flow:wait:' .. key
    local waited = redis.call('SMEMBERS', wait)
    local waiting = #waited
    if waiting > 0 then redis.call('DEL', wait) end
    for q in pairs(ended.qs) do waited[#waited + 1] = q end
    for _, w in ipairs(waited) do  -- (a queue twice: ZADD LT of the same score, a no-op)
      local l, wp = lane_of(w)
      if wp then redis.call('ZADD', P .. 'turns:' .. l .. US .. wp, 'LT', now, key) end
    end
    if waiting > 0 then redis.call('PUBLISH', P .. 'wake', fmt(now)) end
  end
  local qs, ended, keys = redis.call('HMGET', P .. 'flow:held', unpack(tokens)), {}, {}
  for i, q in ipairs(qs) do
    if q then
      ended[#ended + 1] = tokens[i]
      local key = string.match(q, '^.-\31%-?%d+\31(.*)$')
      if key and key ~= '' then
        if not keys[key] then keys[key] = {n = 0, qs = {}}; keys[#keys + 1] = key end
        keys[key].n, keys[key].qs[q] = keys[key].n + 1, true
      end
    end
  end
  if #ended > 0 then redis.call('HDEL', P .. 'flow:held', unpack(ended)) end
  for _, key in ipairs(keys) do flow_freed(key, keys[key]) end
end

