#!lua
-- add.lua: insert, replace or keep a job (the linearization point of schedule/enqueue).
--
-- Equal definition of a live job: no-op, the anchor and pending occurrence are kept.
-- Changed definition: replaced atomically (new generation; the old pending occurrence
-- is removed, old retries become stale; a running invocation may finish). Decide, then
-- write: an old job that does not parse is moved aside first (include/replace.lua).
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, seq, gen, lanes, wake, events, stats, layout,
--   skips:<job_id>, dead:<job_id>, bf:<job_id>, runs:<job_id>, quarantined, quarantined:<entry>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id            ARGV[4] def (canonical definition, opaque)
-- ARGV[5] lane              ARGV[6] kind: after | at | every | cron
-- ARGV[7] after: delay ms (from Redis TIME rounded up); at: due epoch ms; every: interval
--         ("<ms>" or "<p>/<q>" ms, include/grid.lua); cron: the first occurrence (epoch ms)
-- ARGV[8] every: anchor epoch ms or "" (= now, rounded up); cron: the occurrence after the first
-- ARGV[9] misfire grace ms (cron: -1 = the gap to the next occurrence, at most 60 s)
-- ARGV[10] misfire: skip | run_once | catch_up      ARGV[11] overlap: skip | allow | queue
-- ARGV[12] delivery: at_least_once | at_most_once     ARGV[13] max stalls (>= 1)
-- ARGV[14] catch-up window ms, or "" (none)
-- Returns: {outcome, due_in_ms, seq_before, seq_after} with outcome created | replaced |
--          unchanged and the namespace's seq counter before and after this call (a client
--          that finds it below a value it saw acknowledged knows Redis lost writes),
--          or an error reply "ERR duetime bad-input <what>" or "ERR duetime corrupt
--          ..." (nothing written)

--@include core
--@include job
--@include events
--@include due
--@include grid
--@include check
--@include aside
--@include replace

local job, def, lane, kind, anchor_arg = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[8]
local iv = kind == 'every' and interval_of(ARGV[7])
local num = kind == 'every' and (iv and 1 or 0) or int(ARGV[7])
local grace, max_stalls = int(ARGV[9]), int(ARGV[13])
local misfire, overlap, delivery, window = ARGV[10], ARGV[11], ARGV[12], ARGV[14] or ''
local series = kind == 'every' or kind == 'cron'
if job == '' or def == '' or lane == '' or #job > FIELD_MAX or #lane > FIELD_MAX then
  return redis.error_reply('ERR duetime bad-input id')
end
if #def > DEF_MAX then return redis.error_reply('ERR duetime bad-input def') end
if not num or not grace or grace < (kind == 'cron' and -1 or 0) or not max_stalls
    or max_stalls < 1 or (window ~= '' and not (int(window) and int(window) >= 0)) then
  return redis.error_reply('ERR duetime bad-input number')
end
if not rule_ok('kind', kind) then return redis.error_reply('ERR duetime bad-input kind') end
if (series and num <= 0) or (kind == 'after' and num < 0) then
  return redis.error_reply('ERR duetime bad-input interval')
end
if anchor_arg ~= '' and not int(anchor_arg) then
  return redis.error_reply('ERR duetime bad-input anchor')
end
if not (rule_ok('misfire', misfire) and rule_ok('overlap', overlap) and rule_ok('delivery', delivery)) then
  return redis.error_reply('ERR duetime bad-input policy')
end

local corrupt = aside_ok() or seq_ok() or expect(P .. 'lanes', 'set') or lane_ok(lane) or
  events_ok('scheduled', 'quarantined') or select(2, expect_int(P .. 'gen'))
local now, jk = now_ms(), jkey(job)
local old, bad, aside = read_old(job)
corrupt = corrupt or bad
if corrupt then return corrupt end
local seq_before = tonumber(redis.call('GET', P .. 'seq') or '0')
if aside then move_aside(now, 'add', aside) end
local live = old.def and old.cancelled ~= '1' and (not old.state or old.state == '')
if live and old.def == def then
  local due_in = -1
  if old.e and old.e ~= '' then due_in = math.max(0, tonumber(old.next) - now) end
  return {'unchanged', due_in, seq_before, seq_before}
end

local outcome = 'created'
if old.def then
  if live then outcome = 'replaced' end
  local member = series_member(job, old.e)
  if member then redis.call('ZREM', P .. 'due:' .. old.lane, member) end
end
redis.call('DEL', jk, P .. 'skips:' .. job, P .. 'dead:' .. job, P .. 'bf:' .. job, P .. 'runs:' .. job)
local gen = redis.call('INCR', P .. 'gen')
-- only what differs from DEFAULTS (include/job.lua) is written
local set = {'def', def, 'kind', kind, 'gen', fmt(gen)}
local function opt(name, value)
  if value ~= DEFAULTS[name] then set[#set + 1] = name; set[#set + 1] = value end
end
opt('lane', lane); opt('delivery', delivery); opt('max_stalls', fmt(max_stalls))
opt('running', old.running or '0')   -- invocations of a replaced definition may still run
if series then
  opt('misfire', misfire)
  opt('overlap', overlap)
  set[#set + 1] = 'grace'; set[#set + 1] = fmt(grace)
  if window ~= '' then set[#set + 1] = 'window'; set[#set + 1] = window end
end
redis.call('HSET', jk, unpack(set))
redis.call('SADD', P .. 'lanes', lane)
local lay = (iv and iv.b > 0) and LAYOUT_EXACT or LAYOUT  -- a fractional interval: layout 2
if layout ~= lay and layout ~= LAYOUT_EXACT then redis.call('SET', P .. 'layout', lay) end

local due, k = nil, 0
if kind == 'after' then
  due = (num > 0 and now_up() or now) + num  -- none claims it before this call: 0 is now
elseif kind ~= 'every' then  -- at, cron: the first occurrence
  due = num
  if kind == 'cron' and anchor_arg ~= '' then redis.call('HSET', jk, 'after', anchor_arg) end
else
  local anchor = anchor_arg == '' and now_up() or int(anchor_arg)
  redis.call('HSET', jk, 'interval', ARGV[7], 'anchor', fmt(anchor))
  -- grid points after now, never before the anchor (the default anchor, now: one interval on)
  k = math.max(anchor_arg == '' and 1 or 0, last_le(anchor, iv, now) + 1)
  due = occ(anchor, iv, k)
end
if kind == 'at' and due < now then redis.call('HSET', jk, 'ready', fmt(now)) end  -- lag from now
push_series(job, lane, due, k)
if series then redis.call('HSET', jk, 'since', fmt(due)) end
event(now, 'scheduled', job, due, nil, outcome)
return {outcome, math.max(0, due - now), seq_before, tonumber(redis.call('GET', P .. 'seq'))}
