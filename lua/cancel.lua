#!lua
-- cancel.lua: remove a job's pending and future invocations: the linearization point of
-- cancel/deschedule. After it, no invocation of the job can be claimed (stale retry
-- entries are dropped by claim.lua). A RUNNING invocation is not touched and may finish.
--
-- KEYS: none declared; every key is built from ARGV[1] (one hash tag, one slot)
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id
-- Returns: 1 if that prevented at least one start, else 0

local job = ARGV[3]
if job == '' then return redis.error_reply('ERR duetime bad-input id') end
local jk = jkey(job)
local f = redis.call('HMGET', jk, 'cancelled', 'state', 'entry', 'lane', 'retries', 'stash',
  'queued', 'running')
if not f[8] or f[1] == '1' or (f[2] and f[2] ~= '') then return 0 end
local now = now_ms()
local prevented = 0
if f[3] ~= '' and redis.call('ZREM', P .. 'due:' .. f[4], f[3]) == 1 then prevented = 1 end
if tonumber(f[5]) > 0 or f[6] ~= '' or f[7] ~= '' then prevented = 1 end
redis.call('HSET', jk, 'cancelled', '1', 'entry', '', 'retries', '0', 'stash', '',
  'queued', '', 'paused', '')
event(now, 'cancelled', job, nil, nil, '')
if tonumber(f[8]) <= 0 then retire(job, 'cancelled') end
return prevented
