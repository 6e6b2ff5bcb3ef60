-- include/due.lua: the due sorted sets, one per lane, scored by due epoch ms. Members are
-- "<seq>|s|<job>" (the job's series or one-off occurrence; `e` in its hash holds the
-- seq) or "<seq>|r|<gen>|<sched>|<attempt>|<stalls>|<job>" (a retry, released or
-- queued invocation); the seq counter keeps equal due times in FIFO order. A push
-- publishes a wake-up when the new member heads its lane.
-- Provides: next_seq, wake_if_head, push_series, push_retry, parse_member
-- Key families: layout, job:<job_id>, due:<lane>, seq, wake

--@include core
--@include job

local function next_seq()
  return string.format('%012x', redis.call('INCR', P .. 'seq'))
end

-- Publish a wake-up if `member` is now the earliest entry of its lane.
local function wake_if_head(lane, member, due)
  local head = redis.call('ZRANGE', P .. 'due:' .. lane, 0, 0)
  if head[1] == member then redis.call('PUBLISH', P .. 'wake', fmt(due)) end
end

-- The job's series (or one-off) occurrence k, due at `due`.
local function push_series(job, lane, due, k)
  local seq = next_seq()
  local member = seq .. '|s|' .. job
  redis.call('ZADD', P .. 'due:' .. lane, due, member)
  redis.call('HSET', jkey(job), 'e', seq, 'next', fmt(due))
  if k ~= 0 then redis.call('HSET', jkey(job), 'k', fmt(k)) end
  wake_if_head(lane, member, due)
  return member
end

-- A retry (or released / queued) invocation of `sched`, due at `due`.
local function push_retry(job, lane, gen, sched, attempt, stalls, due)
  local member = next_seq() .. '|r|' .. gen .. '|' .. fmt(sched) .. '|' .. fmt(attempt) ..
    '|' .. fmt(stalls) .. '|' .. job
  redis.call('ZADD', P .. 'due:' .. lane, due, member)
  redis.call('HINCRBY', jkey(job), 'retries', 1)
  wake_if_head(lane, member, due)
end

-- A due member, parsed: {seq, kind = 's' | 'r', job; a retry also has gen, sched,
-- attempt, stalls (strings)}; nil if malformed.
local function parse_member(member)
  local seq, kind, rest = string.match(member, '^(%x+)|(%a)|(.*)$')
  local m = {seq = seq, kind = kind}
  if kind == 's' then
    m.job = rest
  elseif kind == 'r' then
    m.gen, m.sched, m.attempt, m.stalls, m.job =
      string.match(rest, '^(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  end
  if m.job then return m end
  return nil
end
