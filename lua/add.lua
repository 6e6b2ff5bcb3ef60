#!lua
-- add.lua: insert, replace or keep jobs (the linearization point of schedule/enqueue).
--
-- Equal definition of a live job: no-op, the anchor and pending occurrence are kept (a
-- definition's trace context takes no part in that comparison: include/provenance.lua).
-- Changed definition: replaced atomically (new generation; the old pending occurrence and
-- waiting re-runs are removed, include/reruns.lua; a running invocation may finish).
-- Decide, then write: an old job that does not parse is moved aside first
-- (include/replace.lua). One call may carry several jobs (enqueue_many): every job's
-- arguments and the namespace's keys are checked before the first write, then each job is
-- decided and written in turn (a later one sees the earlier ones' writes: the same id
-- twice is an upsert of the first).
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, seq, gen, lanes, wake, events, stats, layout,
--   skips:<job_id>, dead:<job_id>, bf:<job_id>, runs:<job_id>, quarantined,
--   quarantined:<entry>, levels:<lane>, turns:<level>, keyrules:stamp
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3..] 12 per job, at most 100 jobs (one job without a stamp may leave out the window),
--   then, optionally (12n + 1 arguments), the stamp of the key rules the caller applied to
--   them (include/keyrules.lua: not the namespace's, the whole call is refused; none: unchecked):
--   job id; def (canonical definition, opaque); lane; kind: after | at | every | cron;
--   num: after: delay ms (from Redis TIME rounded up); at: due epoch ms; every: interval
--   ("<ms>" or "<p>/<q>" ms, include/grid.lua); cron: the first occurrence (epoch ms);
--   anchor: every: epoch ms or "" (= now, rounded up); cron: the occurrence after the first;
--   misfire grace ms (cron: -1 = the gap to the next occurrence, at most 60 s);
--   misfire: skip | run_once | catch_up; overlap: skip | allow | queue;
--   delivery: at_least_once | at_most_once; max stalls (>= 1); catch-up window ms or ""
-- Returns: one job: {outcome, due_in_ms, seq_before, seq_after} with outcome created |
--          replaced | unchanged and the namespace's seq counter before and after this call
--          (a client that finds it below a value it saw acknowledged knows Redis lost
--          writes), or an error reply "ERR duetime bad-input <what>" or "ERR duetime corrupt
--          ..." (nothing written). Several: {seq_before, seq_after, then outcome, due_in_ms
--          per job}, a job whose old data blocks it (the corrupt error above) having that
--          error as its outcome (and -1) with nothing of it written; bad input or a corrupt
--          namespace key: the error reply, nothing written. A stale stamp: the error reply
--          "ERR duetime stale-rules <the namespace's stamp>", nothing written.

--@include core
--@include events
--@include due
--@include aside
--@include put
--@include keyrules
--@include counters

local m = #ARGV - 2
local stamp = m > 12 and m % 12 == 1 and ARGV[#ARGV] or nil
if stamp then m = m - 1 end
if m ~= 11 and (m < 12 or m > 1200 or m % 12 ~= 0) then
  return redis.error_reply('ERR duetime bad-input count')
end
local jobs, lanes, seen = {}, {}, {}
for i = 3, #ARGV - (stamp and 1 or 0), 12 do
  local a, bad = add_input(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4],
    ARGV[i + 5], ARGV[i + 6], ARGV[i + 7], ARGV[i + 8], ARGV[i + 9], ARGV[i + 10], ARGV[i + 11])
  if not a then return bad end
  jobs[#jobs + 1] = a
  if not seen[a.lane] then seen[a.lane] = true; lanes[#lanes + 1] = a.lane end
end
-- The seq and gen of this call's next write: at its first, one for every job left (one INCRBY
-- each); those unused given back at the end: the counters end as one INCR per write leaves them.
local left, taken, last_seq, last_gen = #jobs + 1, 0, nil, nil
local function ids()
  if not last_seq then
    last_seq = redis.call('INCRBY', P .. 'seq', left) - left
    last_gen = redis.call('INCRBY', P .. 'gen', left) - left
    taken = left
  end
  taken, last_seq, last_gen = taken - 1, last_seq + 1, last_gen + 1
  return string.format('%012x', last_seq), last_gen
end

-- The namespace's keys, checked before the first write.
local heads, added = {}, {}  -- each lane's head (include/due.lua); the lanes this call adds
local seq, corrupt = counters()
corrupt = corrupt or rules_stale(stamp) or aside_ok() or expect(P .. 'lanes', 'set')
  or heads_read(lanes, heads)
  or events_ok('scheduled', 'quarantined')
if corrupt then return corrupt end
-- one instant for the whole call, from one TIME: now (floored to the ms) and rounded up
local t = ARGV[2] == '' and redis.call('TIME')
local now = t and tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) or now_ms()
local up = t and tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000) or now
local out, events, born = {tonumber(seq), 0}, 0, 0
-- a new namespace: no seq, no layout, nothing due in these lanes (evidence that survives
-- the eviction of one of them; the live count starts with its first job, README)
local fresh = seq == '0' and not layout
for _, head in pairs(heads) do if head then fresh = false end end
local call = {lanes = added, heads = heads, ids = ids, batch = #jobs > 1}
for _, a in ipairs(jobs) do
  left = left - 1
  local outcome, due_in, wrote, new = put(a, now, up, call)
  out[#out + 1], out[#out + 2] = outcome, due_in
  if wrote then events = events + 1 end
  if new then born = born + 1 end
end
count_live(born)
if fresh and born > 0 then redis.call('HSET', P .. 'stats', 'live_since', fmt(now)) end
if taken > 0 then  -- reserved, not used
  redis.call('INCRBY', P .. 'seq', -taken); redis.call('INCRBY', P .. 'gen', -taken)
end
if #jobs > 1 then
  flush_tally()  -- the `scheduled` events: one entry (include/events.lua), the counter
elseif events > 0 then
  redis.call('HINCRBY', P .. 'stats', 'scheduled', 1)
end
out[2] = out[1] + events  -- each job written took one seq
if #jobs > 1 then return out end
if type(out[3]) == 'table' then return out[3] end  -- the one job's error: nothing written
return {out[3], out[4], out[1], out[2]}
