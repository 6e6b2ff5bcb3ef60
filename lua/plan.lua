#!lua flags=allow-oom
-- plan.lua: write what a replica computed for a calendar (cron) series, which Lua cannot
-- compute itself: the occurrence after the pending one (mode "after"), or the misfire
-- plan of a series that claim.lua left waiting in state `replan` (mode "replan").
-- Compare-and-set: nothing is written unless the job is still as the replica read it
-- (same generation, same due entry, same pending occurrence, not paused), so replicas
-- racing on one series write it once and a stale plan is dropped. Decide, then write:
-- the job (and its skipped ranges) are checked first; a job whose data does not parse is
-- moved aside (include/aside.lua); a corrupt namespace key stops the call before writing.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, seq, wake, events, stats, skips:<job_id>,
--   quarantined, quarantined:<entry>, layout, levels:<lane>, turns:<level>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id            ARGV[4] generation read     ARGV[5] due entry seq read (e)
-- ARGV[6] pending occurrence read (next, epoch ms)
-- ARGV[7] mode: after | replan
-- ARGV[8] after: the occurrence after `next`; replan: the occurrence to keep pending
-- ARGV[9] replan: "1" if that occurrence runs when claimed (the plan decided so), else "0"
-- ARGV[10] replan: the occurrence after it
-- ARGV[11] replan: first skipped occurrence (ms; "" with ARGV[12..14]: nothing skipped)
-- ARGV[12] last skipped occurrence  ARGV[13] how many  ARGV[14] reason
-- Returns: 1 written; 0 the job moved on meanwhile (nothing written) or was moved aside
--          (it did not parse); or an error reply "ERR duetime corrupt ..." 

--@include core
--@include job
--@include due
--@include skips
--@include check
--@include aside
--@include flow

-- Keyed queue `q`'s turn, after a plan moved its member that waited for it (re-announced
-- at `waited`, include/calendar.lua) to a later time: if the turn is still the one that
-- wait set, its first member's, as in process (where the plan is made in the claim).
local function turn_after_wait(q, waited)
  local lane, p, key = lane_of(q)
  if not p or key == '' or not waited then return end
  local tk = P .. 'turns:' .. lane .. US .. p
  if redis.call('ZSCORE', tk, key) ~= waited then return end
  local head = redis.call('ZRANGE', P .. 'due:' .. q, 0, 0, 'WITHSCORES')
  if head[2] and tonumber(head[2]) > tonumber(waited) then redis.call('ZADD', tk, head[2], key) end
end

local job, gen, seq, pending, mode = ARGV[3], ARGV[4], ARGV[5], int(ARGV[6]), ARGV[7]
local occ1, go, occ2 = int(ARGV[8]), ARGV[9], int(ARGV[10] or '')
local skip_first, skip_last, skip_count, reason =
  int(ARGV[11] or ''), int(ARGV[12] or ''), int(ARGV[13] or ''), ARGV[14]
if job == '' or not int(gen) or not pending or not occ1 then
  return redis.error_reply('ERR duetime bad-input plan')
end
if mode ~= 'after' and mode ~= 'replan' then return redis.error_reply('ERR duetime bad-input mode') end
if mode == 'replan' and (not occ2 or (go ~= '1' and go ~= '0')
    or (skip_first and not (skip_last and skip_count and reason ~= ''))) then
  return redis.error_reply('ERR duetime bad-input plan')
end

local corrupt = aside_ok() or seq_ok() or events_ok('skipped', 'quarantined')
if corrupt then return corrupt end
local jk = jkey(job)
local f, why, t = read_job(job, {'gen', 'e', 'next', 'after', 'replan', 'paused', 'cancelled',
  'lane', 'kind'})
if f and skips_problem(job) then why, t = 'malformed job data: ' .. skips_problem(job), 'hash' end
if why then
  move_aside(now_ms(), 'plan', {id = job, job = job, reason = why, type = t})
  return 0
end
if not f then return 0 end
corrupt = lane_ok(f.lane)
if corrupt then return corrupt end
if f.gen ~= gen or f.e ~= seq or f.next ~= fmt(pending) or f.kind ~= 'cron'
    or f.paused == '1' or f.cancelled == '1' then
  return 0
end
if mode == 'after' then
  if f.replan == '1' or (f.after and f.after ~= '') then return 0 end
  redis.call('HSET', jk, 'after', fmt(occ1))
  return 1
end
if f.replan ~= '1' then return 0 end
local now = now_ms()
if skip_first then record_skip_at(now, job, skip_first, skip_last, skip_count, reason) end
local waited = redis.call('ZSCORE', P .. 'due:' .. f.lane, seq .. '|s|' .. job)
redis.call('ZREM', P .. 'due:' .. f.lane, seq .. '|s|' .. job)
redis.call('HDEL', jk, 'replan')
redis.call('HSET', jk, 'go', go == '1' and '1' or '', 'after', fmt(occ2))
if go == '1' and occ1 <= now then  -- due now: it keeps the missed occurrence's place in line
  due_add(f.lane, pending, seq .. '|s|' .. job)
  JOB.set(jk, 'next', fmt(occ1))
  wake_if_head(f.lane, seq .. '|s|' .. job, pending)
else
  push_series(job, f.lane, occ1, 0)
  turn_after_wait(f.lane, waited)
end
return 1
