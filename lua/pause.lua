#!lua
-- pause.lua: stop claiming a job until resume.lua; its pending occurrence is moved out of
-- the due set into the job hash (retry entries are moved there when claim.lua meets them).
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, events, stats, layout
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id
-- Returns: 1 if the job was active and is now paused, else 0

--@include core
--@include job
--@include events

local job = ARGV[3]
if job == '' then return redis.error_reply('ERR duetime bad-input id') end
local jk = jkey(job)
local f = fields(jk, 'def', 'cancelled', 'state', 'e', 'lane', 'paused', 'next')
if not f.def or f.cancelled == '1' or (f.state and f.state ~= '') or f.paused == '1' then
  return 0
end
local stash = ''
local member = series_member(job, f.e)
if member then
  redis.call('ZREM', P .. 'due:' .. f.lane, member)
  stash = f.next .. ' ' .. member .. '\n'
end
redis.call('HSET', jk, 'paused', '1', 'stash', stash, 'e', '')
event(now_ms(), 'paused', job, nil, nil, '')
return 1
