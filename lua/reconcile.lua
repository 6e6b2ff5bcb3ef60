#!lua flags=allow-oom
-- reconcile.lua: one bounded pass of the reconciler: SCAN up to COUNT job keys from a
-- cursor and repair what a crash or a past bug may have left behind (include/repair.lua
-- says what is repaired and what is left alone); on the first call of a full scan from a
-- cursor of the caller's own (duetime doctor), move aside the RUNNING entries that do not
-- parse and hold no lease; also drop lease entries that no RUNNING entry backs (a sample
-- of up to 50; the claim's reaper drops the others when they expire). Each repair
-- re-checks its condition here, in this one call.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: quarantined, quarantined:<entry>, job:<job_id>, due:<lane>, seq, wake,
--   running, lease, events, stats, skips:<job_id>, dead:<job_id>, bf:<job_id>, reconcile,
--   layout, done:<state>, paused, runs:<job_id>, parked, parked:<task>, replica:<owner>,
--   tasks, flow:held, flow:run, flow:wait:<key>, flow:win:<key>, levels:<lane>, limits,
--   turns:<level>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] COUNT: SCAN's count hint, 1..1000
-- ARGV[4] "1": dry run (report only, write nothing), "0": repair
-- ARGV[5] cursor: "" = the namespace's shared cursor (`reconcile`, so replicas continue
--         each other's scan instead of repeating it; stored back unless a dry run), or
--         a SCAN cursor of the caller's own (duetime doctor's full scan; not stored)
-- Returns: JSON {cursor (next; "0" = a full cycle ended), scanned (job keys seen),
--          found: [[job id (a RUNNING entry's: its quarantine entry id "t:..."), what,
--          what was done]], leases (lease entries dropped), live (the job keys scanned
--          that are live, not retired, after the repairs: counted only for a cursor of the
--          caller's own, else 0; duetime doctor compares them with stats `live`)}

--@include core
--@include repair
--@include stray

local count, dry, given = int(ARGV[3]), ARGV[4], ARGV[5]
if not count or count < 1 or count > 1000 or (dry ~= '1' and dry ~= '0') then
  return redis.error_reply('ERR duetime bad-input count or dry-run flag')
end
if given ~= '' and not string.match(given, '^%d+$') then
  return redis.error_reply('ERR duetime bad-input cursor')
end
-- the namespace keys this call may touch, once, before its first write
local corrupt = aside_ok() or seq_ok() or expect(P .. 'running', 'hash') or
  expect(P .. 'lease', 'zset') or expect(P .. 'reconcile', 'string') or
  events_ok('requeued', 'abandoned', 'quarantined')
if corrupt then return corrupt end

local cursor = given
if cursor == '' then cursor = redis.call('GET', P .. 'reconcile') or '0' end
if not string.match(cursor, '^%d+$') then cursor = '0' end  -- a garbled cursor: start over

local now = now_ms()
-- RUNNING entries that do not parse: on the first call of a full scan of the caller's own
-- (duetime doctor); every entry is parsed (~5 us each: 50 ms at 10,000 running), too long
-- for the replicas' background passes, which go on without it
local found = (given ~= '' and cursor == '0') and stray_entries(now, dry == '1') or {}
local counts = running_jobs()
local reply = redis.call('SCAN', cursor, 'MATCH', jkey('*'), 'COUNT', count)
local start = #jkey('') + 1
local live = 0  -- doctor's scan: the live jobs found (a key not retired), after repairs
for _, key in ipairs(reply[2]) do
  local job = string.sub(key, start)
  local r = repair_job(now, job, counts, dry == '1')
  if r then found[#found + 1] = {job, r[1], r[2]} end
  if given ~= '' then
    local t = redis.call('TYPE', key)['ok']
    if t ~= 'none' and (t ~= 'hash' or (redis.call('HGET', key, 'state') or '') == '') then
      live = live + 1
    end
  end
end

local dropped = 0
for _, token in ipairs(redis.call('ZRANDMEMBER', P .. 'lease', 50)) do
  if redis.call('HEXISTS', P .. 'running', token) == 0 then
    if dry == '0' then redis.call('ZREM', P .. 'lease', token) end
    dropped = dropped + 1
  end
end
if given == '' and dry == '0' then redis.call('SET', P .. 'reconcile', reply[1]) end
return cjson.encode({cursor = reply[1], scanned = #reply[2], found = found, leases = dropped,
  live = live})
