#!lua
-- restore.lua: put back a job that was moved aside (the quarantine), after the operator
-- fixed its data: its key is renamed back from `quarantined:<entry>`, its due entry (if
-- one was moved aside with it) is queued again, and the reconciler's check then runs on
-- it at once: if its hash still does not parse, that check moves it aside again, with
-- the reason (and the reply says so). Recorded as a `restored` event.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: quarantined, quarantined:<entry>, job:<job_id>, due:<lane>, seq, wake,
--   running, lease, events, stats, skips:<job_id>, dead:<job_id>, bf:<job_id>, layout,
--   done:<state>, paused, runs:<job_id>, parked, parked:<task>, replica:<owner>, tasks,
--   flow:held, flow:run, flow:wait:<key>, flow:win:<key>, levels:<lane>, limits,
--   turns:<level>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] entry id (the job id for a job moved aside)
-- Returns: "restored", "missing" (no such entry), "exists" (a job with that id exists
--          again: delete it or purge the entry), "no-job" (an entry that holds no job:
--          a due member or a RUNNING entry that did not parse; purge it), "still-bad
--          <why>" (moved aside again at once)

--@include core
--@include repair
--@include flow

local id = ARGV[3]
if id == '' then return redis.error_reply('ERR duetime bad-input id') end
local corrupt = aside_ok() or seq_ok() or expect(P .. 'running', 'hash') or
  events_ok('restored', 'requeued', 'abandoned', 'quarantined')
if corrupt then return corrupt end
local raw = redis.call('HGET', P .. 'quarantined', id)
if not raw then return 'missing' end
local ok, rec = pcall(cjson.decode, raw)
if not ok or type(rec) ~= 'table' or type(rec.job) ~= 'string' or rec.job == '' then
  return 'no-job'
end
local job, data = rec.job, P .. 'quarantined:' .. id
if redis.call('EXISTS', jkey(job)) == 1 then return 'exists' end
if redis.call('EXISTS', data) == 0 then return 'no-job' end
local now = now_ms()
redis.call('RENAME', data, jkey(job))
JOB.forget(jkey(job))
local state = redis.pcall('HGET', jkey(job), 'state')  -- counted as move_aside uncounted it
if type(state) == 'table' or (state or '') == '' then count_live(1) end
redis.call('HDEL', P .. 'quarantined', id)
local member, lane, score = rec.member, rec.lane, tonumber(rec.score)
if type(member) == 'string' and member ~= '' and type(lane) == 'string' and lane ~= ''
    and score and score >= 0 then
  due_add(lane, score, member)
  wake_if_head(lane, member, score)
end
event(now, 'restored', job, nil, nil, 'from the quarantine')
local r = redis.call('TYPE', jkey(job)).ok == 'hash' and repair_job(now, job, running_jobs(), false)
if r and r[2] == 'moved aside' then return 'still-bad ' .. r[1] end
return 'restored'
