-- include/retire.lua: retire a finished or cancelled job: its state is recorded and its
-- hash and lists expire after a day (finished jobs stay inspectable that long).
-- Provides: RETENTION_MS, retire
-- Key families: layout, job:<job_id>, skips:<job_id>, dead:<job_id>, bf:<job_id>

--@include core
--@include job

local RETENTION_MS = 86400000

local function retire(job, outcome)
  local jk = jkey(job)
  redis.call('HSET', jk, 'state', outcome)
  redis.call('PEXPIRE', jk, RETENTION_MS)
  redis.call('PEXPIRE', P .. 'skips:' .. job, RETENTION_MS)
  redis.call('PEXPIRE', P .. 'dead:' .. job, RETENTION_MS)
  redis.call('PEXPIRE', P .. 'bf:' .. job, RETENTION_MS)
end
