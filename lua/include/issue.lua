-- include/issue.lua: issuing claims (the RUNNING transition). A batch collects the claims
-- of one claim.lua call; each gets a token "<owner>:<fence>" and a fence number greater
-- than every earlier one. The batch's fence, RUNNING entries and leases are written once
-- (write_claims): one command each per call instead of per claim. The claimed job's hash
-- is written under the key its caller passes (include/admit.lua builds it). A claim takes
-- its job's skips no run was told of (field `sk`, include/skips.lua): the reply's skip
-- records, "<fence> <bytes>\n<sk>" (b.skips), tell them to the run.
-- Provides: new_batch, hand_out, issue, write_claims
-- Key families: layout, job:<job_id>, events, stats, fence, running, lease

--@include core
--@include st
--@include events
--@include plain

-- The claim batch of one call by `owner` at `now`, leasing for `lease` ms (nil: no
-- expiry); `fence_before` is the fence counter before the call. `plans` lists the
-- calendar jobs the caller must plan (include/calendar.lua); `issued` the series claimed
-- in this call, 'r' for a re-run (their next occurrence waits for a later call:
-- include/defer.lua, defers).
local function new_batch(owner, now, lease, fence_before)
  return {owner = owner, now = now, lease = lease, fence_before = fence_before,
    claims = {}, n = 0, issued = {}, running_set = {}, lease_add = {}, skips = {},
    plans = {}, plan_at = {}, token_head = owner .. ':', started_tail = '@' .. fmt(now),
    lease_until = lease and fmt(now + lease)}
end

-- Hand out claim `sched` (its text `s`; attempt `attempt`, its text `a`; stalls' text) of
-- `job` (generation `gen`, definition `def`) in batch `b`: its fence and token, RUNNING
-- entry and lease (written by write_claims), its event line, its reply record. Claimable
-- from b.ready, or from `sched` if later (lag counts from it). Returns the fence's text.
-- The job's fields were checked (include/check.lua): `def` is UTF-8 of at most DEF_MAX
-- bytes, so it cannot break the decoding of the whole reply.
local function hand_out(b, job, gen, sched, s, attempt, a, stalls, def)
  local fence = (b.fence or b.fence_before) + 1
  b.fence = fence
  local fe = fmt(fence)
  local ready = b.ready and b.ready > sched and b.ready or sched
  local later = ready > sched and fmt(ready)
  if later then need_layout(LAYOUT_READY) end
  local token = b.token_head .. fe
  local rs = b.running_set
  rs[#rs + 1] = token  -- its entry keeps a later ready (a release keeps it: release.lua)
  rs[#rs + 1] = gen .. '|' .. s .. (later and '@' .. later or '') .. '|' .. a .. '|' .. stalls ..
    '|' .. fe .. '|' .. job
  if b.lease then
    local la = b.lease_add
    la[#la + 1] = b.lease_until
    la[#la + 1] = token
  end
  event_tallied(b.now, 'claimed', job, sched, attempt, b.owner, later and ready or nil,
    s .. '|' .. a .. '|' .. (later or '') .. '|' .. job)
  local c = b.claims  -- the reply's claim record (claim.lua's header), def last
  c[#c + 1] = s .. ' ' .. a .. ' ' .. fe .. ' ' .. gen .. ' ' .. (later or s) .. ' ' .. fmt(#job) ..
    ' ' .. fmt(#def) .. '\n'
  c[#c + 1] = job
  c[#c + 1] = def
  b.n = b.n + 1
  return fe
end

-- Claim invocation `sched` (attempt, stalls) of `job` (key `jk`, generation `gen`; its
-- checked fields `f`: running, def, kind) into batch `b`; `...`: more job hash fields to
-- set. Only a recurring job is stamped `started` (its run history, include/history.lua): a
-- one-off pays nothing.
local function issue(b, job, jk, f, gen, sched, attempt, stalls, ...)
  local a = fmt(attempt)
  local fe = hand_out(b, job, gen, sched, fmt(sched), attempt, a, fmt(stalls), f.def)
  local running = f.running == '0' and '1' or fmt(tonumber(f.running) + 1)
  local plan = JOB.plain[jk]
  if plan and plan.f == f and select('#', ...) == 2 then  -- a plain one-off read the plain way
    redis.call('HSET', jk, 'st', PLAIN.claimed(plan, a)); JOB.forget(jk)
  elseif f.kind == 'every' or f.kind == 'cron' then
    JOB.set(jk, 'running', running, 'attempts', a, 'started', fe .. b.started_tail, ...)
  else
    JOB.set(jk, 'running', running, 'attempts', a, ...)
  end
  if f.sk and f.sk ~= '' then  -- skips since its last claim: this run is told of them
    redis.call('HDEL', jk, 'sk')
    b.skips[#b.skips + 1] = fe .. ' ' .. fmt(#f.sk) .. '\n' .. f.sk
    f.sk = ''
  end
end

-- A plain pending one-off's claim, decided the short way (include/plain.lua's look `x`):
-- as admit and issue claim one (claimable since its ready or its due score; attempt 1).
function PLAIN.issue(b, x)
  local since = x.ready ~= '' and tonumber(x.ready) or 0
  b.ready = since > x.score and since or x.score
  hand_out(b, x.job, x.gen, x.sched, x.nxt, 1, '1', '0', x.def)
  redis.call('HSET', x.jk, 'st', PLAIN.claimed(x, '1'))
  JOB.forget(x.jk)
  return true
end

-- A batch of 16 claims or more writes RUNNING and the lease zset as a hashtable and a
-- skiplist: below 512 fields and 128 members Redis keeps a key as a listpack, which every
-- read, write and removal of one entry scans whole (a batch's writes and its commits then
-- cost its size squared). A field and a member longer than any listpack limit, first in
-- the write, make the key a table before its entries go in; they are removed at once (no
-- reader sees them; a key never turns back into a listpack while it holds entries).
-- Neither holds ':' (no token). A smaller batch writes as it is (a table costs ~40k
-- instructions to make and to drop, more than a few entries' scans).
local function write_claims(b)
  if b.fence then redis.call('SET', P .. 'fence', fmt(b.fence)) end
  local wide = b.n >= 16 and string.rep('~', 1024)
  if wide then
    redis.call('HSET', P .. 'running', wide, '', unpack(b.running_set))
    redis.call('HDEL', P .. 'running', wide)
  elseif #b.running_set > 0 then
    redis.call('HSET', P .. 'running', unpack(b.running_set))
  end
  if wide and #b.lease_add > 0 then
    redis.call('ZADD', P .. 'lease', '+inf', wide, unpack(b.lease_add))
    redis.call('ZREM', P .. 'lease', wide)
  elseif #b.lease_add > 0 then
    redis.call('ZADD', P .. 'lease', unpack(b.lease_add))
  end
  flush_tally()
end
