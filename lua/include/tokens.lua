-- include/tokens.lua: running invocations, held under a token (RUNNING entry + lease), and
-- the token check of complete / fail / release: only the current owner, within its
-- lease, may commit; a resend of a commit that already happened answers "ok".
-- Provides: parse_running, running_of, not_owned, owned, drop_running, take
-- Key families: layout, job:<job_id>, running, lease

--@include core
--@include job

-- A RUNNING entry ("gen|sched|attempt|stalls|fence|job"), parsed; nil for none.
local function parse_running(data)
  if not data then return nil end
  local gen, sched, attempt, stalls, fence, job =
    string.match(data, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  return {gen = gen, sched = tonumber(sched), attempt = tonumber(attempt),
          stalls = tonumber(stalls), fence = tonumber(fence), job = job}
end

-- The running invocation held under `token`, parsed; nil if none.
local function running_of(token)
  return parse_running(redis.call('HGET', P .. 'running', token))
end

-- Why `token` may not commit for `job`, given its running invocation `r` (nil if none):
-- nil when it owns one (its lease is checked by the caller), else the code to answer
-- ('ok' for a resend of a commit that already happened).
local function not_owned(job, token, r)
  if r and r.job ~= job then return 'lease_lost' end  -- a token of another job
  if r then return nil end
  if redis.call('HGET', jkey(job), 'last_token') == token then return 'ok' end
  if redis.call('EXISTS', jkey(job)) == 1 then return 'lease_lost' end
  return 'not_found'
end

-- Token check shared by complete / fail / release: returns the running invocation, or
-- an error code ('ok' for a resend of a commit that already happened).
local function owned(now, job, token)
  local r = running_of(token)
  local code = not_owned(job, token, r)
  if code then return nil, code end
  local deadline = redis.call('ZSCORE', P .. 'lease', token)
  if deadline and tonumber(deadline) <= now then return nil, 'lease_lost' end
  return r
end

local function drop_running(token)
  redis.call('HDEL', P .. 'running', token)
  redis.call('ZREM', P .. 'lease', token)
end

-- complete / fail / release: take the invocation out of RUNNING if `token` owns it.
-- Returns the running invocation, or nil and the code to answer with.
local function take(now, job, token)
  local r, code = owned(now, job, token)
  if r then drop_running(token) end
  return r, code
end
