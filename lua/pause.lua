#!lua
-- pause.lua: stop claiming a job until resume.lua; its pending occurrence is moved out of
-- the due set into the job hash (retry entries are moved there when claim.lua meets them).
--
-- KEYS: none declared; every key is built from ARGV[1] (one hash tag, one slot)
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id
-- Returns: 1 if the job was active and is now paused, else 0

local job = ARGV[3]
if job == '' then return redis.error_reply('ERR duetime bad-input id') end
local jk = jkey(job)
local f = redis.call('HMGET', jk, 'cancelled', 'state', 'entry', 'lane', 'paused', 'next', 'running')
if not f[7] or f[1] == '1' or (f[2] and f[2] ~= '') or f[5] == '1' then return 0 end
local stash = ''
if f[3] ~= '' then
  redis.call('ZREM', P .. 'due:' .. f[4], f[3])
  stash = f[6] .. ' ' .. f[3] .. '\n'
end
redis.call('HSET', jk, 'paused', '1', 'stash', stash, 'entry', '')
event(now_ms(), 'paused', job, nil, nil, '')
return 1
