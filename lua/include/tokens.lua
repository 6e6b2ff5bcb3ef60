-- include/tokens.lua: running invocations, held under a token (RUNNING entry + lease), and
-- the token check of complete / fail / release: only the current owner, within its
-- lease, may commit; a resend of a commit that already happened answers "ok". A RUNNING
-- entry that does not parse is reported as such ("corrupt"), never as a lease loss.
-- Provides: running_ok, parse_running, running_job, running_of, not_owned, owned, drop_running
-- Key families: layout, job:<job_id>, running, lease, due:<lane>, flow:held, flow:run,
--   flow:wait:<key>, flow:win:<key>, levels:<lane>, limits, turns:<level>, wake

--@include core
--@include job
--@include utf8
--@include limits

-- Checked once per call by every script that reads or writes RUNNING entries or leases.
local function running_ok()
  return expect(P .. 'lease', 'zset') or expect(P .. 'running', 'hash')
end

-- A RUNNING entry ("gen|sched[@ready]|attempt|stalls|fence|job"; "@ready": its claim's
-- ready, when later than sched, include/issue.lua), parsed; nil for none, false if it
-- does not parse (numbers as core's int() reads them, a UTF-8 job id); sched_text and
-- attempt_text: those numbers as stored (an event line needs no second formatting).
-- `rest` (a metatable; include/commit.lua's): the numbers sched, attempt, stalls, fence
-- are left to `rest` (kept as their texts: `<name>_text`), converted only if read.
local function parse_running(data, rest)
  if not data then return nil end
  if #data > 2048 then return false end
  local gen, sched, at, attempt, stalls, fence, job =  -- an ASCII job: one pass
    string.match(data, '^(%d+)|(%d+)(@?%d*)|(%d+)|(%d+)|(%d+)|([^\128-\255]+)$')
  if not gen then
    gen, sched, at, attempt, stalls, fence, job =
      string.match(data, '^(%d+)|(%d+)(@?%d*)|(%d+)|(%d+)|(%d+)|(.+)$')
    if job and not utf8_ok(job) then return false end
  end
  -- digits only (the pattern), so int() is the length check, then tonumber
  local ready = job and at_ms(at)
  if not ready or #gen > 16 or #sched > 16 or #attempt > 16 or #stalls > 16 or #fence > 16 then
    return false
  end
  if rest then
    return setmetatable({gen = gen, job = job, sched_text = sched, attempt_text = attempt,
      stalls_text = stalls, fence_text = fence, ready = ready}, rest)
  end
  return {gen = gen, sched = tonumber(sched), attempt = tonumber(attempt),
          stalls = tonumber(stalls), fence = tonumber(fence), job = job,
          sched_text = sched, attempt_text = attempt, ready = ready}
end

-- The job id of a RUNNING entry (either form) without parse_running's checks (nil if it has none): for
-- counting every entry of the hash, where parsing each one would cost ~3x as much.
local function running_job(data)
  return string.match(data, '^%d+|%d+@?%d*|%d+|%d+|%d+|(.*)$')
end

-- The running invocation held under `token`, parsed (nil: none; false: does not parse),
-- and the entry as stored.
local function running_of(token)
  local data = redis.call('HGET', P .. 'running', token)
  return parse_running(data), data
end

-- Why `token` may not commit for `job`, given its running invocation `r` (nil if none,
-- false if its entry does not parse): nil when it owns one (its lease is checked by the
-- caller), else the code to answer ('ok' for a resend of a commit that already happened,
-- 'corrupt' for an entry that does not parse).
local function not_owned(job, token, r)
  if r == false then return 'corrupt' end
  if r and r.job ~= job then return 'lease_lost' end  -- a token of another job
  if r then return nil end
  if redis.pcall('HGET', jkey(job), 'last_token') == token then return 'ok' end  -- pcall: any type
  if redis.call('EXISTS', jkey(job)) == 1 then return 'lease_lost' end
  return 'not_found'
end

-- Token check shared by complete / fail / release (read only): returns the running
-- invocation, or nil and the code to answer; and the RUNNING entry as stored.
local function owned(now, job, token)
  local r, data = running_of(token)
  local code = not_owned(job, token, r)
  if code then return nil, code, data end
  local deadline = redis.call('ZSCORE', P .. 'lease', token)
  if deadline and tonumber(deadline) <= now then return nil, 'lease_lost', data end
  return r, nil, data
end

local function drop_running(token)
  redis.call('HDEL', P .. 'running', token)
  redis.call('ZREM', P .. 'lease', token)
  flow_end_many({token})  -- a keyed invocation's slot (include/limits.lua)
end
