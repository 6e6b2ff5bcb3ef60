-- include/due.lua: the due sorted sets, one per lane, scored by due epoch ms. Members are
-- "<seq>|s|<job>" (the job's series or one-off occurrence; `e` in its hash holds the
-- seq) or "<seq>|r|<gen>|<sched>[@<ready>]|<attempt>|<stalls>|<job>" (a retry, released
-- or queued invocation; "@<ready>": a released claim's ready, dropped by a resume); the
-- seq counter keeps equal due times in FIFO order. A push publishes a wake-up when the new
-- member heads its lane (add.lua: wake_new, told by the head it read while checking it).
-- Provides: lane_ok, seq_ok, next_seq, wake_if_head, heads_read, wake_new, push_series, push_retry, parse_member
-- Key families: layout, job:<job_id>, due:<lane>, seq, wake, levels:<lane>, turns:<level>

--@include core
--@include job
--@include utf8
--@include rules
--@include reruns
--@include flow

JOB.RETRY_READ = {'kind', 'paused', 'stash', 'reruns', 'e'}  -- what push_retry reads
-- Namespace checks, before the first write: the due set of `lane`; the seq counter.
local function lane_ok(lane) return expect(P .. 'due:' .. lane, 'zset') end
local function seq_ok()
  local _, bad = expect_int(P .. 'seq')
  return bad
end

local function next_seq()
  return string.format('%012x', redis.call('INCR', P .. 'seq'))
end

-- Publish a wake-up if `member` is now the earliest entry of its lane.
local function wake_if_head(lane, member, due)
  local head = redis.call('ZRANGE', P .. 'due:' .. lane, 0, 0)
  if head[1] == member then redis.call('PUBLISH', P .. 'wake', fmt(due)) end
end

-- Each lane of `lanes`: the head of its due set into `heads` ({score, member}; false:
-- empty; for wake_new), the set's type checked on the way (an error reply: a
-- key of another type). nil, or the error.
local function heads_read(lanes, heads)
  for _, lane in ipairs(lanes) do
    local head = redis.pcall('ZRANGE', P .. 'due:' .. lane, 0, 0, 'WITHSCORES')
    if head['err'] then return lane_ok(lane) or head end
    heads[lane] = head[1] ~= nil and {tonumber(head[2]), head[1]}
  end
  return nil
end

-- Publish a wake-up if `member`, just added at `due`, heads its lane: told by the head
-- read before (heads[lane]: {score, member}; false: the set was empty; nil: unknown), else
-- asked (unknown, or a tie: members of one score order by their bytes).
local function wake_new(heads, lane, member, due)
  local h = heads[lane]
  if h == nil or (h and h[1] == due) then
    heads[lane] = nil
    return wake_if_head(lane, member, due)
  end
  if h and due > h[1] then return end
  heads[lane] = {due, member}
  redis.call('PUBLISH', P .. 'wake', fmt(due))
end

-- The job's series (or one-off) occurrence k, due at `due`.
local function push_series(job, lane, due, k)
  local seq = next_seq()
  local member = seq .. '|s|' .. job
  due_add(lane, due, member)
  JOB.set(jkey(job), 'e', seq, 'next', fmt(due))
  if k ~= 0 then redis.call('HSET', jkey(job), 'k', fmt(k)) end
  wake_if_head(lane, member, due)
  return member
end

-- A re-run (a retry; a released, reaped, queued, triggered, backfilled or operator-retried
-- invocation) of `sched`, due at `due`: in its lane and listed in the job's `reruns`; or,
-- the job paused, kept in its stash (resume.lua puts it back). A one-off's `next` becomes
-- its due time, unless its first run is still pending (`e`: a replaced one-off whose old
-- run an operator retried): `next` is that run's time, the claim's scheduled one. `acc`: a
-- call that pushes many collects the lines (include/reruns.lua); `ready`: a released
-- claim's ready, kept in the member ("@<ready>"; claim takes it as is).
-- The caller checked the job's `stash` and `reruns` (include/check.lua).
local function push_retry(job, lane, gen, sched, attempt, stalls, due, acc, ready)
  local at = ready and '@' .. fmt(ready) or ''
  if ready then need_layout(LAYOUT_READY) end
  local member = next_seq() .. '|r|' .. gen .. '|' .. fmt(sched) .. at .. '|' .. fmt(attempt) ..
    '|' .. fmt(stalls) .. '|' .. job
  local jk, line = jkey(job), rerun_line(due, member)
  JOB.incr(jk, 'retries', 1)
  local got = acc and acc.got or JOB.hmget(jk, JOB.RETRY_READ, redis.call)
  if acc then acc.got = got end
  if got[2] == '1' and keep_line(jk, 'stash', got, 3, line, DEF_MAX, acc) then return end
  due_add(lane, due, member)
  keep_line(jk, 'reruns', got, 4, line, RERUNS_MAX, acc)
  if got[1] ~= 'every' and got[1] ~= 'cron' and (got[5] or '') == '' then
    JOB.set(jk, 'next', fmt(due))
  end
  wake_if_head(lane, member, due)
end

-- A due member, parsed: {seq, kind = 's' | 'r', job; a retry also has gen, sched, ready
-- (0: none), attempt, stalls}; nil if malformed (numbers as core's int() reads them, a UTF-8 job id).
local function parse_member(member)
  if #member > 2048 then return nil end
  local seq, kind, rest = string.match(member, '^(%x+)|(%a)|([^\128-\255]+)$')  -- ASCII: one pass
  local plain = seq ~= nil  -- (else its job id's UTF-8 is checked below)
  if not plain then seq, kind, rest = string.match(member, '^(%x+)|(%a)|(.+)$') end
  if not seq or #seq > 16 then return nil end
  local m
  if kind == 's' then
    m = {seq = seq, kind = kind, job = rest}
  elseif kind == 'r' then
    local gen, sched, at, attempt, stalls, job =
      string.match(rest, '^(%d+)|(%d+)(@?%d*)|(%d+)|(%d+)|(.+)$')
    -- digits only (the pattern), so int() is the length check, then tonumber
    local ready = job and at_ms(at)
    if not ready or #gen > 16 or #sched > 16 or #attempt > 16 or #stalls > 16 then return nil end
    m = {seq = seq, kind = kind, gen = gen, sched = tonumber(sched), attempt = tonumber(attempt),
      stalls = tonumber(stalls), job = job, ready = ready}
  end
  if not m or (not plain and string.find(m.job, '[\128-\255]') and not utf8_ok(m.job)) then return nil end
  return m
end
