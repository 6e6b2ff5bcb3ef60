-- include/told.lua: tell the handles that wait for a job (`result()`) how an invocation of
-- it ended, and keep what a later handle reads. A handle registers in the zset waits
-- (member: its job, or "<job>@<sched ms>" for one invocation; score: until when it waits,
-- ms) before it reads the stored outcome; an end that a member waits for is published on
-- the channel results and the member removed (its handles are told). A recurring job's
-- outcome is kept in res:<invocation>: every run's for its `keep` (its result_ttl), else
-- a run a handle waited for, for a day (a one-off's stays in its job hash). Cost when
-- nobody waits and no `keep` is set: one EXISTS per call (`waiting`, asked once).
-- Message: "<state>|<sched ms>|<job>\n<payload>" (a result's JSON text, an error's text).
-- (One table, TOLD, holds the unit's functions: one local of a script's main chunk, where
-- claim.lua's come near Lua's 200.)
-- Provides: TOLD
-- Key families: layout, waits, results, res:<invocation>

--@include core
--@include rules

local TOLD = {KEPT = '86400000'}  -- KEPT: a waited-for recurring run's outcome, ms
--@call
TOLD.w = nil  -- asked once a call (waiting)
--@end

-- Is any handle waiting in this namespace? (Asked once a call.)
function TOLD.waiting()
  if TOLD.w == nil then TOLD.w = redis.call('EXISTS', P .. 'waits') == 1 end
  return TOLD.w
end

-- Handles waiting for `member` (a job, or "<job>@<sched ms>") at `now`: true if any
-- still waits (the member is removed: they are told now); those that gave up go.
function TOLD.hit(now, member)
  local hold = redis.call('ZSCORE', P .. 'waits', member)
  if hold then redis.call('ZREM', P .. 'waits', member) end
  return hold ~= false and tonumber(hold) >= now
end

-- `job`'s invocation `sched` (ms; nil: the job as a whole, cancelled) ended as `state`
-- with `payload`; `f`: the job's checked fields (kind, keep; nil: gone or unknown). Its
-- waiters are the handles of the job (a one-off's, or a recurring job's next end) and of
-- "<job>@<sched>" (that invocation); a cancel tells every handle of the job.
function TOLD.ended(now, job, sched, state, payload, f)
  local recurring = f ~= nil and (f.kind == 'every' or f.kind == 'cron')
  local keep = recurring and sched and RULE.keep(f.keep) and f.keep
  if not keep and not TOLD.waiting() then return end
  local s = sched and fmt(sched) or ''
  local msg = state .. '|' .. s .. '|' .. job .. '\n' .. payload
  if keep then redis.pcall('SET', P .. 'res:' .. job .. '@' .. s, msg, 'PX', keep) end
  if not TOLD.waiting() then return end
  local told = TOLD.hit(now, job)
  if sched then told = TOLD.hit(now, job .. '@' .. s) or told end
  if not told and sched then return end  -- (a cancel is told to every handle of the job)
  if recurring and sched and not keep then
    redis.pcall('SET', P .. 'res:' .. job .. '@' .. s, msg, 'PX', TOLD.KEPT)
  end
  redis.call('PUBLISH', P .. 'results', msg)
end
