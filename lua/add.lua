#!lua
-- add.lua: insert, replace or keep a job (the linearization point of schedule/enqueue).
--
-- Equal definition of a live job: no-op, the anchor and pending occurrence are kept.
-- Changed definition: replaced atomically (new generation; the old pending occurrence
-- is removed, old retries become stale; a running invocation may finish).
--
-- KEYS: none declared; every key is built from ARGV[1] (one hash tag, one slot)
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id            ARGV[4] def (canonical definition, opaque)
-- ARGV[5] lane              ARGV[6] kind: after | at | every
-- ARGV[7] after: delay ms; at: due epoch ms; every: interval ms
-- ARGV[8] every: anchor epoch ms or "" (= now)
-- ARGV[9] misfire grace ms  ARGV[10] misfire: skip | run_once | catch_up
-- ARGV[11] overlap: skip | allow | queue
-- ARGV[12] delivery: at_least_once | at_most_once     ARGV[13] max stalls (>= 1)
-- Returns: {outcome, due_in_ms} with outcome created | replaced | unchanged,
--          or an error reply "ERR duetime bad-input <what>" (nothing written)

local job, def, lane, kind = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local num, anchor_arg = int(ARGV[7]), ARGV[8]
local grace, max_stalls = int(ARGV[9]), int(ARGV[13])
local misfire, overlap, delivery = ARGV[10], ARGV[11], ARGV[12]
if job == '' or def == '' or lane == '' then return redis.error_reply('ERR duetime bad-input id') end
if not num or not grace or grace < 0 or not max_stalls or max_stalls < 1 then
  return redis.error_reply('ERR duetime bad-input number')
end
if kind ~= 'after' and kind ~= 'at' and kind ~= 'every' then
  return redis.error_reply('ERR duetime bad-input kind')
end
if (kind == 'every' and num <= 0) or (kind == 'after' and num < 0) then return redis.error_reply('ERR duetime bad-input interval') end
if anchor_arg ~= '' and not int(anchor_arg) then
  return redis.error_reply('ERR duetime bad-input anchor')
end
if (misfire ~= 'skip' and misfire ~= 'run_once' and misfire ~= 'catch_up')
    or (overlap ~= 'skip' and overlap ~= 'allow' and overlap ~= 'queue')
    or (delivery ~= 'at_least_once' and delivery ~= 'at_most_once') then
  return redis.error_reply('ERR duetime bad-input policy')
end

local now = now_ms()
local jk = jkey(job)
local old = redis.call('HMGET', jk, 'def', 'cancelled', 'state', 'next', 'entry', 'lane',
  'running', 'gen')
local live = old[1] and old[2] ~= '1' and (not old[3] or old[3] == '')
if live and old[1] == def then
  local due_in = -1
  if old[5] and old[5] ~= '' then due_in = math.max(0, tonumber(old[4]) - now) end
  return {'unchanged', due_in}
end

local outcome = 'created'
if old[1] then
  if live then outcome = 'replaced' end
  if old[5] and old[5] ~= '' then redis.call('ZREM', P .. 'due:' .. old[6], old[5]) end
end
local running = old[7] or '0'
redis.call('DEL', jk, P .. 'skips:' .. job, P .. 'dead:' .. job)
local gen = redis.call('INCR', P .. 'gen')
redis.call('HSET', jk, 'def', def, 'lane', lane, 'kind', kind, 'grace', fmt(grace),
  'misfire', misfire, 'overlap', overlap, 'delivery', delivery,
  'max_stalls', fmt(max_stalls), 'gen', fmt(gen), 'running', running, 'retries', '0',
  'queued', '', 'paused', '', 'stash', '', 'cancelled', '', 'state', '', 'runs', '0',
  'failures', '0', 'attempts', '0', 'created', fmt(now))
redis.call('SADD', P .. 'jobs', job)
redis.call('SADD', P .. 'lanes', lane)

local due, k = nil, 0
if kind == 'after' then
  due = now + num
elseif kind == 'at' then
  due = num
else
  local anchor = now
  if anchor_arg ~= '' then anchor = int(anchor_arg) end
  redis.call('HSET', jk, 'interval', fmt(num), 'anchor', fmt(anchor))
  k = math.max(0, last_le(anchor, num, now) + 1)  -- grid points after now, never before anchor
  due = occ(anchor, num, k)
end
push_series(job, lane, due, k)
event(now, 'scheduled', job, due, nil, outcome)
return {outcome, math.max(0, due - now)}
