#!lua flags=allow-oom
-- delete.lua: remove a job and everything it owns: its hash, its series member, its
-- skips, dead letters and backfill record, and its entries in the listing indexes. A
-- running invocation is not touched and may finish; its commit then finds no job and is
-- answered "not_found" (include/commit.lua), never as a lease loss. Its waiting re-runs
-- (`reruns`, include/reruns.lua) leave the due set too; a retry member it does not list
-- is dropped by claim.lua as a member of a gone job.
-- Decide, then write: the job key's type and its lane and series entry are read before the
-- first write; a job key of any type is deleted (nothing of it is parsed but the lane, the
-- seq and the lines of `reruns`, and a due set of another type is left alone), and a corrupt event stream or
-- counter stops the call before any write. A live job (not retired) leaves the live count.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, skips:<job_id>, dead:<job_id>, bf:<job_id>,
--   done:<state>, dead-jobs, paused, events, stats, layout, runs:<job_id>, parked,
--   parked:<task>, replica:<owner>, seq, tasks, wake, levels:<lane>, turns:<level>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id
-- Returns: 1 if the job existed and was deleted, 0 if there was no such job; or an error
--          reply "ERR duetime corrupt ..." (nothing written)

--@include core
--@include job
--@include events
--@include park
--@include reruns

local STATES = {'succeeded', 'failed', 'abandoned', 'cancelled'}

local job = ARGV[3]
if job == '' then return redis.error_reply('ERR duetime bad-input id') end
local corrupt = events_ok('deleted')
if corrupt then return corrupt end
local jk = jkey(job)
local t = redis.call('TYPE', jk)['ok']
if t == 'none' then return 0 end
local lane, e, def, live, reruns = nil, nil, nil, 1, nil  -- another type: live (as aside)
if t == 'hash' then
  local got = JOB.hmget(jk, {'lane', 'e', 'state', 'def', 'reruns'}, redis.call) or {}
  lane, e, live, def = got[1] or DEFAULTS.lane, got[2], (got[3] or '') == '' and 1 or 0, got[4]
  reruns = got[5]
end
-- write
if lane and e and e ~= '' then
  redis.pcall('ZREM', P .. 'due:' .. lane, JOB.member(job, e))
  drop_parked(def, JOB.member(job, e))  -- or it waited for a replica
end
if lane then take_reruns(lane, reruns, function(m) return drop_parked(def, m) end) end
redis.call('DEL', jk, P .. 'skips:' .. job, P .. 'dead:' .. job, P .. 'bf:' .. job, P .. 'runs:' .. job)
JOB.forget(jk)
for _, state in ipairs(STATES) do redis.pcall('ZREM', P .. 'done:' .. state, job) end
redis.pcall('ZREM', P .. 'dead-jobs', job)
redis.pcall('SREM', P .. 'paused', job)
count_live(-live)
event(now_ms(), 'deleted', job, nil, nil, t == 'hash' and '' or ('a ' .. t .. ' key'))
return 1
