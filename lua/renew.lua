#!lua flags=allow-oom
-- renew.lua: extend the leases of a batch of claims to now + lease, for each token that
-- still owns its invocation with an unexpired lease. Idempotent (safe to resend).
-- Decide, then write: it parses no entry; a lease or running key of the wrong type stops
-- the call before any write.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: lease, running, layout
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] lease ms          ARGV[4..] tokens
-- Returns: one code per token, in order: "ok" | "lease_lost"; or an error reply
--          "ERR duetime corrupt ..." (nothing written)

--@include core

local lease = int(ARGV[3])
if not lease or lease <= 0 then return redis.error_reply('ERR duetime bad-input lease') end
local corrupt = expect(P .. 'lease', 'zset') or expect(P .. 'running', 'hash')
if corrupt then return corrupt end
local now = now_ms()
local out = {}
for i = 4, #ARGV do
  local token = ARGV[i]
  local deadline = redis.call('ZSCORE', P .. 'lease', token)
  if deadline and tonumber(deadline) > now and redis.call('HEXISTS', P .. 'running', token) == 1 then
    redis.call('ZADD', P .. 'lease', now + lease, token)
    out[#out + 1] = 'ok'
  else
    out[#out + 1] = 'lease_lost'
  end
end
return out
