#!lua
-- backfill.lua: queue one run, due now, of each given past occurrence of a recurring job
-- that never ran: it precedes the series' first occurrence (`since`), or lies in a
-- recorded skipped range, and no earlier backfill queued it (the bf:<job> set). Each run
-- keeps its invocation identity (job id + scheduled instant), so nothing that ran (or
-- was queued by a backfill) runs again. Nothing at or after the pending occurrence is
-- touched: the series itself runs those. Decide, then write: the job, its skipped
-- ranges and its bf set are checked first; a job whose data does not parse is moved
-- aside (include/aside.lua); a corrupt namespace key stops the call before writing.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, seq, wake, events, stats, skips:<job_id>,
--   bf:<job_id>, quarantined, quarantined:<entry>, layout, levels:<lane>, turns:<level>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id            ARGV[4] generation the caller read the schedule from
-- ARGV[5..] candidate occurrences, epoch ms, computed by the caller from that schedule
-- Returns: how many runs were queued; -1 if the job is gone, cancelled or was replaced
--          since the caller read it (nothing written), or was moved aside (it did not
--          parse); or an error reply "ERR duetime corrupt ..." 

--@include core
--@include events
--@include job
--@include due
--@include reruns
--@include skips
--@include check
--@include aside

local job, gen = ARGV[3], ARGV[4]
if job == '' or not int(gen) then return redis.error_reply('ERR duetime bad-input id') end
local cands = {}
for i = 5, #ARGV do
  local t = int(ARGV[i])
  if not t then return redis.error_reply('ERR duetime bad-input occurrence') end
  cands[#cands + 1] = t
end

local corrupt = aside_ok() or seq_ok() or events_ok('backfilled', 'quarantined')
if corrupt then return corrupt end
local f, why, t = read_job(job, {'gen', 'cancelled', 'state', 'next', 'since', 'lane', 'retries',
  'paused', 'stash', 'reruns'})
local bft = redis.call('TYPE', P .. 'bf:' .. job)['ok']
if f and (skips_problem(job) or (bft ~= 'none' and bft ~= 'zset')) then
  why, t = 'malformed job data: ' .. (skips_problem(job) or 'bf:' .. job .. ' is a ' .. bft ..
    ', not a zset'), 'hash'
end
if why then
  move_aside(now_ms(), 'backfill', {id = job, job = job, reason = why, type = t})
  return -1
end
if not f then return -1 end
corrupt = lane_ok(f.lane)
if corrupt then return corrupt end
if f.gen ~= gen or f.cancelled == '1' or (f.state and f.state ~= '') then return -1 end
local pending, since = tonumber(f.next), int(f.since or '')
local ranges = {}
for _, s in ipairs(redis.call('LRANGE', P .. 'skips:' .. job, 0, -1)) do
  local a, b = string.match(s, '^(%d+)|(%d+)|')
  if a then ranges[#ranges + 1] = {tonumber(a), tonumber(b)} end
end
local function never_ran(t)
  if since and t < since then return true end
  for _, r in ipairs(ranges) do
    if r[1] <= t and t <= r[2] then return true end
  end
  return false
end

local now = now_ms()
local bf = P .. 'bf:' .. job
local queued, acc = 0, {}  -- the runs' lines, written to the job once (include/reruns.lua)
for _, t in ipairs(cands) do
  if (not pending or t < pending) and never_ran(t) and not redis.call('ZSCORE', bf, t) then
    redis.call('ZADD', bf, t, fmt(t))
    push_retry(job, f.lane, gen, t, 1, 0, now, acc)
    event(now, 'backfilled', job, t, 1, '')
    queued = queued + 1
  end
end
flush_lines(jkey(job), acc)
return queued
