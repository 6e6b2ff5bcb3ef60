#!lua
-- resume.lua: make a paused job claimable again; occurrences missed meanwhile follow the
-- job's misfire policy when claim.lua meets them. Releases a held (queued) occurrence if
-- nothing of the job runs.
--
-- KEYS: none declared; every key is built from ARGV[1] (one hash tag, one slot)
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id
-- Returns: 1 if the job was paused, else 0

local job = ARGV[3]
if job == '' then return redis.error_reply('ERR duetime bad-input id') end
local jk = jkey(job)
local f = redis.call('HMGET', jk, 'paused', 'stash', 'lane', 'running', 'queued', 'gen')
if f[1] ~= '1' then return 0 end
local now = now_ms()
redis.call('HSET', jk, 'paused', '', 'stash', '')
for score, member in string.gmatch(f[2], '(%d+) ([^\n]+)\n') do
  redis.call('ZADD', P .. 'due:' .. f[3], tonumber(score), member)
  if string.match(member, '^%x+|s|') then redis.call('HSET', jk, 'entry', member) end
  wake_if_head(f[3], member, tonumber(score))
end
event(now, 'resumed', job, nil, nil, '')
if tonumber(f[4]) <= 0 and f[5] ~= '' then
  redis.call('HINCRBY', jk, 'running', 1)  -- settle() releases the queued occurrence
  settle(now, job, 'released')
end
return 1
