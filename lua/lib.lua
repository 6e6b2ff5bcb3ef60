-- lib.lua: helpers shared by every script. The loader (scheduler/stores/lua.py) places
-- this file right after each script's shebang line, so every script can use it.
--
-- Conventions of every script:
--   ARGV[1]  key prefix "duetime:{<namespace>}:" (every key shares its hash tag, so a
--            script touches one cluster slot)
--   ARGV[2]  "" to use Redis TIME as "now", or an integer epoch ms (test clocks only)
--   times are integer epoch milliseconds, formatted with %d (never tostring)
--   every script validates its input before its first write (scripts do not roll back)

local P = ARGV[1]
local RETENTION_MS = 86400000  -- finished jobs stay inspectable for a day

local function fmt(n) return string.format('%d', n) end

-- An integer argument (ms, counts): digits only, so nan, inf, 1.5 and 0x10 are refused.
local function int(s)
  if type(s) == 'string' and #s <= 16 and string.match(s, '^%-?%d+$') then
    return tonumber(s)
  end
  return nil
end

if ARGV[2] ~= '' and not int(ARGV[2]) then
  return redis.error_reply('ERR duetime bad-input now')
end

-- The data layout these scripts read and write. add.lua records it in the namespace; a
-- namespace written by another layout is refused loudly instead of misread silently
-- (e.g. producers and replicas of different versions during a rolling upgrade).
local LAYOUT = '1'
local layout = redis.call('GET', P .. 'layout')
if layout and layout ~= LAYOUT then
  return redis.error_reply('ERR duetime layout ' .. layout .. ' in this namespace, but this ' ..
    'duetime writes layout ' .. LAYOUT .. ': run one version of duetime per namespace')
end

local function now_ms()
  if ARGV[2] ~= '' then return tonumber(ARGV[2]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function jkey(job) return P .. 'job:' .. job end

local function xadd_event(now, kind, job, sched, attempt, detail)
  redis.call('XADD', P .. 'events', 'MAXLEN', '~', 10000, '*', 'kind', kind, 'job', job,
    'sched', sched and fmt(sched) or '', 'attempt', attempt and fmt(attempt) or '',
    'detail', detail or '', 'at', fmt(now))
end

local function event(now, kind, job, sched, attempt, detail)
  xadd_event(now, kind, job, sched, attempt, detail)
  redis.call('HINCRBY', P .. 'stats', kind, 1)
end

-- Batch scripts: the same event, with its counter added up in `tally` and written once
-- by flush_tally() before the script returns (one HINCRBY per kind instead of per job).
local tally = {}
local function event_tallied(now, kind, job, sched, attempt, detail)
  xadd_event(now, kind, job, sched, attempt, detail)
  tally[kind] = (tally[kind] or 0) + 1
end

local function flush_tally()
  for kind, n in pairs(tally) do redis.call('HINCRBY', P .. 'stats', kind, n) end
  tally = {}
end

local function next_seq()
  return string.format('%012x', redis.call('INCR', P .. 'seq'))
end

-- Publish a wake-up if `member` is now the earliest entry of its lane.
local function wake_if_head(lane, member, due)
  local head = redis.call('ZRANGE', P .. 'due:' .. lane, 0, 0)
  if head[1] == member then redis.call('PUBLISH', P .. 'wake', fmt(due)) end
end

-- Job hash fields are written only when they differ from these defaults (a pending
-- one-off job's hash is small enough for Redis's compact listpack encoding).
local DEFAULTS = {lane = 'default', k = '0', running = '0', retries = '0', misfire = 'skip',
  overlap = 'skip', delivery = 'at_least_once', max_stalls = '3'}

-- HMGET with defaults: returns a table field -> value (missing fields: DEFAULTS or nil).
local function fields(jk, ...)
  local names = {...}
  local got = redis.call('HMGET', jk, unpack(names))
  local out = {}
  for i, name in ipairs(names) do
    local v = got[i]
    if v == false then v = DEFAULTS[name] end
    out[name] = v
  end
  return out
end

-- The due member of a job's series entry, from the job hash field `e` (its seq).
local function series_member(job, e)
  if e and e ~= '' then return e .. '|s|' .. job end
  return nil
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

local function push_capped(key, value, cap)
  redis.call('LPUSH', key, value)
  redis.call('LTRIM', key, 0, cap - 1)
end

local function dead_letter(now, job, sched, attempt, reason)
  event(now, 'dead_lettered', job, sched, attempt, reason)
  push_capped(P .. 'dead:' .. job,
    cjson.encode({at = now, sched = sched, attempt = attempt, reason = reason}), 20)
end

local function retire(job, outcome)
  local jk = jkey(job)
  redis.call('HSET', jk, 'state', outcome)
  redis.call('PEXPIRE', jk, RETENTION_MS)
  redis.call('PEXPIRE', P .. 'skips:' .. job, RETENTION_MS)
  redis.call('PEXPIRE', P .. 'dead:' .. job, RETENTION_MS)
  redis.call('PEXPIRE', P .. 'bf:' .. job, RETENTION_MS)
end

-- After an invocation of `job` ended (`how`: succeeded, failed, released, abandoned):
-- release a queued occurrence, or retire a finished one-off or cancelled job.
local function settle(now, job, how)
  local jk = jkey(job)
  if redis.call('EXISTS', jk) == 0 then return end
  if redis.call('HINCRBY', jk, 'running', -1) > 0 then return end
  local f = fields(jk, 'queued', 'cancelled', 'paused', 'kind', 'e', 'retries', 'lane', 'gen')
  local queued, cancelled, paused, kind = f.queued, f.cancelled, f.paused, f.kind
  if queued and queued ~= '' and cancelled ~= '1' and paused ~= '1' then
    redis.call('HSET', jk, 'queued', '')
    local sched, k = string.match(queued, '^(%d+)|(%-?%d*)$')
    if k ~= '' then
      push_series(job, f.lane, tonumber(sched), tonumber(k))  -- a parked catch-up series
    else
      push_retry(job, f.lane, f.gen, tonumber(sched), 1, 0, tonumber(sched))
    end
    return
  end
  if cancelled == '1' then
    retire(job, 'cancelled')
  elseif kind ~= 'every' and kind ~= 'cron' and (not f.e or f.e == '') and tonumber(f.retries) <= 0
      and paused ~= '1' and how ~= 'released' then
    retire(job, how)
  end
end

-- Fixed-rate grid arithmetic (mirrors scheduler/schedules.py; integer ms, exact).
local function occ(anchor, iv, k) return anchor + k * iv end

local function last_le(anchor, iv, t)
  if t < anchor then return -1 end
  local k = math.floor((t - anchor) / iv)
  while occ(anchor, iv, k) > t do k = k - 1 end
  while occ(anchor, iv, k + 1) <= t do k = k + 1 end
  return k
end

local function first_ge(anchor, iv, t)
  local k = math.max(0, math.ceil((t - anchor) / iv))
  while k > 0 and occ(anchor, iv, k - 1) >= t do k = k - 1 end
  while occ(anchor, iv, k) < t do k = k + 1 end
  return k
end

-- The misfire plan for due occurrence k: run index (or nil), next k, skipped range, reason.
-- `window` (ms or nil): with catch_up, occurrences older than it are skipped.
local function plan(anchor, iv, k, now, policy, grace, window)
  local why = 'misfire'
  if policy == 'catch_up' then
    if not window then return k, k + 1 end
    grace, why = window, 'catch-up-window'
  end
  local on_time = first_ge(anchor, iv, now - grace)
  if k >= on_time then return k, k + 1 end
  local m = last_le(anchor, iv, now)
  if policy == 'run_once' then
    if m > k then return m, m + 1, k, m - 1, 'coalesced' end
    return m, m + 1
  end
  if on_time <= m then return on_time, on_time + 1, k, on_time - 1, why end
  return nil, m + 1, k, m, why
end

local function record_skip_at(now, job, first, last, count, reason)
  event(now, 'skipped', job, first, nil, fmt(count) .. ' occurrence(s): ' .. reason)
  push_capped(P .. 'skips:' .. job, fmt(first) .. '|' .. fmt(last) .. '|' .. fmt(count) ..
    '|' .. reason, 20)
end

local function record_skip(now, job, anchor, iv, first_k, last_k, reason)
  record_skip_at(now, job, occ(anchor, iv, first_k), occ(anchor, iv, last_k),
    last_k - first_k + 1, reason)
end

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
