#!lua flags=allow-oom
-- release.lua: hand a claimed but unstarted invocation back at once, same attempt (used
-- by a shutting-down replica so nobody waits for its lease). A one-off's first run is
-- pending again exactly as before its claim (its entry, `next`: trigger brings it forward
-- and readouts show when it is due; its `ready`: its claim's), or in its stash if the job
-- was paused meanwhile (as pause.lua leaves a pending run); any other run waits as a
-- retry entry, which keeps its claim's ready (include/due.lua). Token-checked.
-- Decide, then write: the RUNNING entry and the job are checked before the first write;
-- one that does not parse is moved aside (include/commit.lua), and a corrupt namespace key
-- stops the call before any write.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, lease, running, seq, wake, events, stats,
--   skips:<job_id>, dead:<job_id>, bf:<job_id>, quarantined, quarantined:<entry>, layout,
--   done:<state>, paused, runs:<job_id>, flow:held, flow:run, flow:wait:<key>,
--   flow:win:<key>, levels:<lane>, limits, turns:<level>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id   ARGV[4] token
-- Returns: "ok" | "lease_lost" | "not_found" | "quarantined" (the invocation's RUNNING
--          entry or job did not parse: moved aside), or an error reply "ERR duetime
--          corrupt ..." (nothing written)

--@include core
--@include job
--@include events
--@include tokens
--@include due
--@include settle
--@include commit

local job, token = ARGV[3], ARGV[4]
if job == '' or token == '' then return redis.error_reply('ERR duetime bad-input token') end
local corrupt = commit_guard('released')
if corrupt then return corrupt end
local now = now_ms()
local plan, bad = commit_plan(job, token, 'released (not started)', owned(now, job, token))
if not plan then return bad end
if plan.q then return commit_aside(now, 'release', plan) end
if plan.code then return commit_code(plan) end
drop_running(token)
local jk, r, f = jkey(job), plan.r, plan.f or {}
redis.call('HSET', jk, 'last_token', token)
event(now, 'released', job, r.sched, r.attempt, '')
if f.gen == r.gen and f.cancelled ~= '1' then
  if r.attempt == 1 and f.kind ~= 'every' and f.kind ~= 'cron' and (f.e or '') == '' then
    if f.paused == '1' then  -- its job paused meanwhile: stashed, as pause.lua stashes it
      redis.call('HSET', jk, 'stash', (f.stash or '') .. fmt(r.sched) .. ' ' .. next_seq() ..
        '|s|' .. job .. '\n', 'next', fmt(r.sched))  -- (resume.lua makes it due again)
    else
      push_series(job, f.lane, r.sched, 0)  -- a one-off's first run: pending as before its claim
      JOB.set(jk, 'ready', fmt(math.max(r.sched, r.ready)))  -- ready as claimed
    end
  else
    push_retry(job, f.lane, r.gen, r.sched, r.attempt, r.stalls, r.sched, nil,
      math.max(r.sched, r.ready))  -- ready as claimed
  end
end
settle(now, job, 'released')
return 'ok'
