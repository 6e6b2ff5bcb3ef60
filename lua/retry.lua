#!lua
-- retry.lua: an operator's retry: every dead-lettered invocation of a job is queued again,
-- each once, due now, at attempt 1 (its attempt count reset); a failed or abandoned job is
-- live again (its state and expiry removed) and retires as usual after the runs. Recorded
-- as one event retried_by_operator. Refused: an unknown job, one with an invocation
-- running, and one with no dead letter (a live job that did not fail, or a cancelled or
-- succeeded one). No token: it acts on the job, not on an invocation.
-- Decide, then write: the job's key type and fields and its dead letters are checked
-- first; a job whose data does not parse is moved aside (the quarantine,
-- include/aside.lua), and a corrupt namespace key stops the call before any write.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, seq, wake, events, stats, skips:<job_id>,
--   dead:<job_id>, bf:<job_id>, done:<state>, dead-jobs, quarantined, quarantined:<entry>,
--   layout, levels:<lane>, turns:<level>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id
-- Returns: the number of invocations queued (>= 1), or "unknown" (no such job, or moved
--          aside: it did not parse) | "running" | "not_failed"; or an error reply
--          "ERR duetime corrupt ..."

--@include core
--@include job
--@include events
--@include due
--@include dead
--@include check
--@include aside

-- The distinct scheduled times (ms) of a job's dead letters, oldest first.
local function dead_scheds(job)
  local out, seen = {}, {}
  local letters = redis.call('LRANGE', P .. 'dead:' .. job, 0, -1)
  for i = #letters, 1, -1 do
    local ok, d = pcall(cjson.decode, letters[i])
    local s = ok and type(d) == 'table' and d.sched
    if type(s) == 'number' and s >= 0 and s == math.floor(s) and not seen[s] then
      seen[s] = true
      out[#out + 1] = s
    end
  end
  return out
end

local job = ARGV[3]
if job == '' then return redis.error_reply('ERR duetime bad-input id') end
local corrupt = aside_ok() or seq_ok() or events_ok('retried_by_operator', 'quarantined')
if corrupt then return corrupt end
local jk, now = jkey(job), now_ms()
local f, why, t = read_job(job, {'gen', 'state', 'cancelled', 'lane', 'running', 'kind', 'paused',
  'stash', 'reruns'})
if not why and f and dead_problem(job) then
  why, t = 'malformed job data: ' .. dead_problem(job), 'hash'
end
if why then
  move_aside(now, 'retry', {id = job, job = job, reason = why, type = t})
  return 'unknown'
end
if not f then return 'unknown' end
if tonumber(f.running) > 0 then return 'running' end
if f.cancelled == '1' or f.state == 'cancelled' or f.state == 'succeeded' then
  return 'not_failed'
end
local scheds = dead_scheds(job)
if #scheds == 0 then return 'not_failed' end
corrupt = lane_ok(f.lane)
if corrupt then return corrupt end
-- write
if f.state and f.state ~= '' then
  redis.call('HDEL', jk, 'state')
  count_live(1)  -- live again
  for _, k in ipairs({jk, P .. 'skips:' .. job, P .. 'bf:' .. job}) do redis.call('PERSIST', k) end
  redis.pcall('ZREM', P .. 'done:' .. f.state, job)
end
for _, s in ipairs(scheds) do push_retry(job, f.lane, f.gen, s, 1, 0, now) end
redis.call('DEL', P .. 'dead:' .. job)
redis.pcall('ZREM', P .. 'dead-jobs', job)
event(now, 'retried_by_operator', job, nil, nil, fmt(#scheds) .. ' invocation(s) queued')
return #scheds
