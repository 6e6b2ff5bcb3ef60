#!lua
-- backfill.lua: queue one run, due now, of each given past occurrence of a recurring job
-- that never ran: it precedes the series' first occurrence (`since`), or lies in a
-- recorded skipped range, and no earlier backfill queued it (the bf:<job> set). Each run
-- keeps its invocation identity (job id + scheduled instant), so nothing that ran (or
-- was queued by a backfill) runs again. Nothing at or after the pending occurrence is
-- touched: the series itself runs those.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, seq, wake, events, stats, skips:<job_id>,
--   bf:<job_id>, layout
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id            ARGV[4] generation the caller read the schedule from
-- ARGV[5..] candidate occurrences, epoch ms, computed by the caller from that schedule
-- Returns: how many runs were queued; -1 if the job is gone, cancelled or was replaced
--          since the caller read it (nothing written)

--@include core
--@include job
--@include events
--@include due

local job, gen = ARGV[3], ARGV[4]
if job == '' or not int(gen) then return redis.error_reply('ERR duetime bad-input id') end
local cands = {}
for i = 5, #ARGV do
  local t = int(ARGV[i])
  if not t then return redis.error_reply('ERR duetime bad-input occurrence') end
  cands[#cands + 1] = t
end

local jk = jkey(job)
local f = fields(jk, 'gen', 'cancelled', 'state', 'next', 'since', 'lane')
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
local queued = 0
for _, t in ipairs(cands) do
  if (not pending or t < pending) and never_ran(t) and not redis.call('ZSCORE', bf, t) then
    redis.call('ZADD', bf, t, fmt(t))
    push_retry(job, f.lane, gen, t, 1, 0, now)
    event(now, 'backfilled', job, t, 1, '')
    queued = queued + 1
  end
end
return queued
