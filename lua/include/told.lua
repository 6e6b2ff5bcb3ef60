-- include/told.lua: tell the handles that wait for a job (`result()`) how an invocation of
-- it ended. A handle registers its job in the zset waits (score: until when it waits, ms)
-- before it reads the stored outcome; an end of a registered job is published on the
-- channel results, and a recurring job's kept in res:<invocation> for a day (a one-off's
-- stays in its job hash). Cost when nobody waits: one EXISTS per call (`waiting`).
-- Message: "<state>|<sched ms>|<job>\n<payload>" (a result's JSON text, an error's text).
-- (One table, TOLD, holds the unit's functions: one local of a script's main chunk, where
-- claim.lua's come near Lua's 200.)
-- Provides: TOLD
-- Key families: layout, waits, results, res:<invocation>

--@include core

local TOLD = {KEPT = '86400000'}  -- KEPT: a recurring invocation's outcome, for its handles

-- Is any handle waiting in this namespace? (Once per call; tell only if so.)
function TOLD.waiting()
  return redis.call('EXISTS', P .. 'waits') == 1
end

-- `job`'s invocation `sched` (ms; nil: the job as a whole, cancelled) ended as `state`
-- with `payload`; `recurring`: its handles name one invocation, so the outcome is kept.
function TOLD.tell(now, job, sched, state, payload, recurring)
  local hold = redis.call('ZSCORE', P .. 'waits', job)
  if not hold then return end
  if tonumber(hold) < now then
    redis.call('ZREM', P .. 'waits', job)  -- its handles gave up
    return
  end
  local s = sched and fmt(sched) or ''
  local msg = state .. '|' .. s .. '|' .. job .. '\n' .. payload
  if recurring and sched then
    redis.pcall('SET', P .. 'res:' .. job .. '@' .. s, msg, 'PX', TOLD.KEPT)
  elseif not recurring then
    redis.call('ZREM', P .. 'waits', job)  -- a one-off ends once: its handles are told now
  end
  redis.call('PUBLISH', P .. 'results', msg)
end
