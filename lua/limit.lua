#!lua flags=allow-oom
-- limit.lua: declare, change or remove the limit of a scope: a limit key, a pattern of
-- keys ("<prefix>:*", each key it matches limited on its own) or "*" (docs/flow-control.md).
-- It takes effect at the next claim: the queues of keys it may govern that wait (for a
-- rate's window, for a concurrency slot) get their turn now and are judged again, and
-- the replicas are woken. flags=allow-oom: an operator steers the drain of a full Redis
-- with it (it adds at most one field of `limits`).
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: limits, lanes, levels:<lane>, turns:<level>, wake, layout, due:<lane>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] scope (1..1024 bytes)
-- ARGV[4] "<rate> <period ms> <concurrency>" (0: none of it), or "" to remove the limit
-- Returns: 1 if the limit changed, 0 if it already was so; or an error reply
--          "ERR duetime bad-input ..." or "ERR duetime corrupt ..." (nothing written)

--@include core
--@include flow

local scope, text = ARGV[3], ARGV[4]
if scope == '' or #scope > 1024 then return redis.error_reply('ERR duetime bad-input scope') end
if text ~= '' and not string.match(text, '^%d+ %d+ %d+$') then
  return redis.error_reply('ERR duetime bad-input limit')
end
local corrupt = expect(P .. 'limits', 'hash') or expect(P .. 'lanes', 'set')
if corrupt then return corrupt end
local old = redis.call('HGET', P .. 'limits', scope)
if (old or '') == text then return 0 end
if text == '' then
  redis.call('HDEL', P .. 'limits', scope)
else
  redis.call('HSET', P .. 'limits', scope, text)
end

-- the keys it may govern: itself, or those a pattern's prefix starts ("*": every key)
local prefix = string.sub(scope, -1) == '*' and string.sub(scope, 1, -2)
local function governs(key)
  return key == scope or (prefix and string.sub(key, 1, #prefix) == prefix)
end

local now = now_ms()
for _, lane in ipairs(redis.call('SMEMBERS', P .. 'lanes')) do
  local levels = redis.pcall('SMEMBERS', P .. 'levels:' .. lane)  -- derived: another type, none
  for _, p in ipairs(levels['err'] and {} or levels) do
    local tk = P .. 'turns:' .. lane .. US .. p
    local waits = redis.pcall('ZRANGEBYSCORE', tk, '(' .. fmt(now), '+inf')
    for _, key in ipairs(waits['err'] and {} or waits) do
      if key ~= '' and governs(key) then redis.call('ZADD', tk, now, key) end
    end
  end
end
redis.call('PUBLISH', P .. 'wake', fmt(now))
return 1
