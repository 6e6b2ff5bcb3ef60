#!lua
-- rule.lua: declare, change or remove a key rule of the namespace: the template that gives
-- a job added without a limit key its key, for a task ("task:<name>") or a lane
-- ("lane:<name>") (docs/flow-control.md, "A job's limit key"). A change bumps the rules'
-- stamp in the same call, so an add sent with the stamp of the rules it applied before the
-- change is refused (include/keyrules.lua) and sent again with the new ones; jobs already
-- stored keep their key.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: keyrules, keyrules:stamp, layout
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] the rule's name: "task:<name>" or "lane:<name>" (6..1024 bytes)
-- ARGV[4] its template (checked by the caller: scheduler/keyrules.py), "" to remove the rule
-- Returns: the new stamp "<changes>.<ms>" if the rule changed, "" if it already was so; or
--          an error reply "ERR duetime bad-input ..." or "ERR duetime corrupt ..."
--          (nothing written)

--@include core

local name, text = ARGV[3], ARGV[4]
local kind = string.sub(name, 1, 5)
if (kind ~= 'task:' and kind ~= 'lane:') or #name < 6 or #name > 1024 or #text > 1024 then
  return redis.error_reply('ERR duetime bad-input rule')
end
local stamp_key = P .. 'keyrules:stamp'
local corrupt = expect(P .. 'keyrules', 'hash') or expect(stamp_key, 'string')
if corrupt then return corrupt end
local old = redis.call('HGET', P .. 'keyrules', name)
if (old or '') == text then return '' end
if text == '' then
  redis.call('HDEL', P .. 'keyrules', name)
else
  redis.call('HSET', P .. 'keyrules', name, text)
end
-- the count of changes, and the time of this one: a stamp never seen before, even after the
-- namespace was purged or a failover lost the last change (the count starts again then)
local changes = tonumber(string.match(redis.call('GET', stamp_key) or '', '^(%d+)')) or 0
local stamp = fmt(changes + 1) .. '.' .. fmt(now_ms())
redis.call('SET', stamp_key, stamp)
return stamp
