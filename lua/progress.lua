#!lua
-- progress.lua: store the progress a running invocation reported
-- (`current_invocation().progress(value)`) in its job's hash, field progress =
-- "<sched ms>|<at ms>|<JSON>", where `duetime show`, the console and handles read it.
-- Token-checked: written only while the token owns the invocation with an unexpired
-- lease (a stale owner's report is refused), and only into a job that exists. No
-- allow-oom flag: progress is not worth writing into a full Redis (the caller drops it).
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: layout, running, lease, job:<job_id>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id   ARGV[4] token   ARGV[5] the invocation's scheduled ms
-- ARGV[6] the progress as JSON text (at most 4096 bytes: the caller checks)
-- Returns: "ok" | "lease_lost" | "not_found"; or an error reply "ERR duetime bad-input ..."

--@include core

local job, token, sched, value = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if job == '' or token == '' or not int(sched) then
  return redis.error_reply('ERR duetime bad-input progress')
end
if #value > 4096 then return redis.error_reply('ERR duetime bad-input progress size') end
local now = now_ms()
local entry = redis.pcall('HGET', P .. 'running', token)
local deadline = redis.pcall('ZSCORE', P .. 'lease', token)
if type(entry) ~= 'string' or string.sub(entry, -#job - 1) ~= '|' .. job then return 'lease_lost' end
if deadline and type(deadline) == 'string' and tonumber(deadline) <= now then return 'lease_lost' end
local jk = P .. 'job:' .. job
if redis.call('EXISTS', jk) == 0 then return 'not_found' end
redis.pcall('HSET', jk, 'progress', sched .. '|' .. fmt(now) .. '|' .. value)
return 'ok'
