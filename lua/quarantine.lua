#!lua flags=allow-oom
-- quarantine.lua: move a claimed job aside when its replica cannot read its definition
-- (the JSON that Lua does not parse: not JSON, not an object, arguments that are not a
-- JSON object, an unknown schedule kind). Token-checked like complete.lua: only the
-- claim's owner, within its lease, moves it; its RUNNING entry and lease are dropped and
-- the job key is renamed to quarantined:<job> with the record of include/aside.lua
-- (by "claim": found at claim time), counted by one `quarantined` event. Decide, then
-- write: the token is checked first; a corrupt namespace key stops the call before any
-- write.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, lease, running, events, stats, quarantined,
--   quarantined:<entry>, layout, due:<lane>, flow:held, flow:run, flow:wait:<key>,
--   flow:win:<key>, levels:<lane>, limits, turns:<level>, wake
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id   ARGV[4] token   ARGV[5] reason (text; the first 1000 bytes are kept)
-- Returns: "ok" (moved aside) | "lease_lost" (also for a RUNNING entry that does not
--          parse: the reaper moves that aside) | "not_found", or an error reply "ERR
--          duetime corrupt ..." (nothing written)

--@include core
--@include job
--@include events
--@include tokens
--@include aside

local job, token, reason = ARGV[3], ARGV[4], string.sub(ARGV[5] or '', 1, 1000)
if job == '' or token == '' then return redis.error_reply('ERR duetime bad-input token') end
if reason == '' then return redis.error_reply('ERR duetime bad-input reason') end
local corrupt = running_ok() or aside_ok() or events_ok('quarantined')
if corrupt then return corrupt end
local now = now_ms()
local r, code, data = owned(now, job, token)
if not r then return code == 'corrupt' and 'lease_lost' or code end  -- ownership unproven
local jk = jkey(job)
local t = redis.call('TYPE', jk)['ok']
local lane = t == 'hash' and (redis.call('HGET', jk, 'lane') or 'default') or ''
drop_running(token)
move_aside(now, 'claim', {id = job, job = job, reason = reason, member = '', lane = lane,
  type = t, running = data, token = token})
return 'ok'
