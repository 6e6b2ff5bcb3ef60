#!lua flags=allow-oom
-- purge.lua: drop an entry of the quarantine for good: its record and the raw data kept
-- with it (`quarantined:<entry>`). Recorded as a `purged` event.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: quarantined, quarantined:<entry>, events, stats, layout
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] entry id
-- Returns: 1 if the entry existed, else 0

--@include core
--@include events

local id = ARGV[3]
if id == '' then return redis.error_reply('ERR duetime bad-input id') end
local existed = redis.call('HDEL', P .. 'quarantined', id)
redis.call('DEL', P .. 'quarantined:' .. id)
if existed == 1 then event(now_ms(), 'purged', '', nil, nil, 'quarantine entry ' .. id) end
return existed
