#!lua
-- claim.lua: reap expired leases, then claim up to N due invocations per lane under a
-- lease (the RUNNING transition). Each claim gets a fresh token and a fence number that
-- is greater than every earlier one. A recurring job's next occurrence (anchor + k*iv,
-- misfire policy applied) is written here, in the same step, so a series can be neither
-- lost nor doubled. A resend of the same request returns the same reply.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] owner id          ARGV[4] request id ([A-Za-z0-9-]+; resend detection: the
--                           last reply per owner is kept for 60 s)
-- ARGV[5] lease ms ("" = no expiry)
-- ARGV[6..] lane, capacity pairs (capacity 0..1000)
-- Returns: JSON {now, next (ms, -1 = nothing), claims: [{j, s, a, t, f, l, g, def}], epoch,
--          fence, plan: [job id]}
--          "next" covers lanes with capacity left and the next lease expiry; "epoch" is
--          the namespace's epoch key ("" if missing: Redis lost its data); "fence" is the
--          fence counter before this call (below a fence already handed out: claims lost);
--          "plan" lists calendar jobs that need the caller to compute occurrences.
--
-- Calendar (cron) series: Lua cannot evaluate a cron expression in a time zone, so the
-- job hash carries the pending occurrence `next` and the one after it, `after`, both
-- computed by replicas. A due occurrence whose fate is clear from these two (on time;
-- or the only due one) is claimed or skipped here and `after` becomes pending; the
-- caller then computes the new `after` (plan.lua). Otherwise (several missed, or
-- `after` not known yet) the job waits in state `replan`, re-announced every second,
-- until a replica applies the misfire policy in Python and writes the result.

local owner, req, lease = ARGV[3], ARGV[4], ARGV[5]
if owner == '' or not string.match(req, '^[%w%-]+$') then
  return redis.error_reply('ERR duetime bad-input owner')
end
if lease ~= '' and not (int(lease) and int(lease) > 0) then
  return redis.error_reply('ERR duetime bad-input lease')
end
local caps = {}
for i = 6, #ARGV, 2 do
  local n = int(ARGV[i + 1])
  if not n or n < 0 or n > 1000 or ARGV[i] == '' then  -- one call stays short
    return redis.error_reply('ERR duetime bad-input capacity')
  end
  caps[#caps + 1] = {ARGV[i], n}
end

local last = redis.call('GET', P .. 'claimed:' .. owner)
if last and string.sub(last, 1, #req + 1) == req .. '\n' then
  return string.sub(last, #req + 2)   -- a resend: same reply, nothing claimed twice
end

local now = now_ms()
lease = int(lease)
local fence_before = tonumber(redis.call('GET', P .. 'fence') or '0')

-- 1. expired leases: attempt+1 (at-least-once), abandoned (at-most-once) or dead letter
for _, token in ipairs(redis.call('ZRANGEBYSCORE', P .. 'lease', '-inf', now, 'LIMIT', 0, 100)) do
  local r = running_of(token)
  drop_running(token)
  if r then
    local jk = jkey(r.job)
    local f = fields(jk, 'gen', 'cancelled', 'delivery', 'max_stalls', 'lane')
    event(now, 'lease_lost', r.job, r.sched, r.attempt, token)
    local how = 'failed'
    local live = f.gen == r.gen and f.cancelled ~= '1'
    if live and f.delivery == 'at_most_once' then
      how = 'abandoned'
      event(now, 'abandoned', r.job, r.sched, r.attempt, 'lease lost')
    elseif live and r.stalls + 1 < tonumber(f.max_stalls) then
      push_retry(r.job, f.lane, r.gen, r.sched, r.attempt + 1, r.stalls + 1, now)
      how = 'released'
    elseif f.gen then
      dead_letter(now, r.job, r.sched, r.attempt, 'lease lost')
    end
    settle(now, r.job, how)
  end
end

-- 2. claim, lane by lane. The batch's fences, RUNNING entries and leases are written
-- once, after the loop (write_claims): one command each per call instead of per claim.
-- Strict UTF-8 (as Python decodes it: no overlongs, no surrogates, <= U+10FFFF). Only
-- called on text holding a byte >= 0x80; ASCII definitions skip it.
local function utf8_ok(s)
  local i, n = 1, #s
  while i <= n do
    local c = string.byte(s, i)
    if c < 0x80 then
      i = i + 1
    else
      local len, lo, hi = 0, 0x80, 0xBF
      if c >= 0xC2 and c <= 0xDF then len = 2
      elseif c >= 0xE0 and c <= 0xEF then
        len = 3
        if c == 0xE0 then lo = 0xA0 elseif c == 0xED then hi = 0x9F end
      elseif c >= 0xF0 and c <= 0xF4 then
        len = 4
        if c == 0xF0 then lo = 0x90 elseif c == 0xF4 then hi = 0x8F end
      end
      if len == 0 or i + len - 1 > n then return false end
      local c2 = string.byte(s, i + 1)
      if c2 < lo or c2 > hi then return false end
      for j = i + 2, i + len - 1 do
        local cc = string.byte(s, j)
        if cc < 0x80 or cc > 0xBF then return false end
      end
      i = i + len
    end
  end
  return true
end

local claims = {}
local fence, running_set, lease_add = nil, {}, {}
local job_running = 0  -- the job's `running` count, as admit() read it (issue() adds one)
local function issue(job, jk, gen, sched, attempt, stalls, def, ...)
  if def and string.find(def, '[\128-\255]') and not utf8_ok(def) then
    -- binary garbage (e.g. a pickle) would break the whole reply's decoding: send a
    -- definition the replica cannot parse, so it quarantines this one job (fail.lua)
    def = 'invalid UTF-8 in the stored job definition'
  end
  fence = (fence or fence_before) + 1
  local token = owner .. ':' .. fmt(fence)
  running_set[#running_set + 1] = token
  running_set[#running_set + 1] = gen .. '|' .. fmt(sched) .. '|' .. fmt(attempt) ..
    '|' .. fmt(stalls) .. '|' .. fmt(fence) .. '|' .. job
  local until_ms = -1
  if lease then
    until_ms = now + lease
    lease_add[#lease_add + 1] = until_ms
    lease_add[#lease_add + 1] = token
  end
  job_running = job_running + 1
  redis.call('HSET', jk, 'running', fmt(job_running), 'attempts', fmt(attempt), ...)
  event_tallied(now, 'claimed', job, sched, attempt, owner)
  claims[#claims + 1] = {j = job, s = sched, a = attempt, t = token, f = fence, l = until_ms,
                         g = gen, def = def}
end

local function write_claims()
  if fence then redis.call('SET', P .. 'fence', fmt(fence)) end
  if #running_set > 0 then redis.call('HSET', P .. 'running', unpack(running_set)) end
  if #lease_add > 0 then redis.call('ZADD', P .. 'lease', unpack(lease_add)) end
  flush_tally()
end

-- Calendar series: can occurrence t be decided from t and `after` alone? Returns
-- decided, and the reason to record t as skipped (nil: run it).
local plans = {}
local function cron_step(f, t, window)
  if f.replan == '1' then return false end
  local after = int(f.after or '')
  if not after then return false end
  if f.go == '1' then return true, nil end  -- a replica decided: run it
  local grace, why = tonumber(f.grace), 'misfire'
  if grace < 0 then grace = math.min(after - t, 60000) end
  if f.misfire == 'catch_up' then
    if not window or t >= now - window then return true, nil end
    grace, why = window, 'catch-up-window'
  end
  if t >= now - grace then return true, nil end
  if after <= now then return false end  -- several due and missed: the policy decides
  if f.misfire == 'run_once' then return true, nil end
  return true, why
end

-- Keep a calendar series waiting for a replica's plan: re-announced every second.
local function wait_for_plan(job, lane)
  local seq = next_seq()
  redis.call('ZADD', P .. 'due:' .. lane, now + 1000, seq .. '|s|' .. job)
  redis.call('HSET', jkey(job), 'e', seq)
  plans[#plans + 1] = job
end

-- Decide about one due member (already removed from its due set); returns true if it
-- became a claim.
local function admit(lane, member)
  local seq, kind, rest = string.match(member, '^(%x+)|(%a)|(.*)$')
  local job, gen, sched, attempt, stalls
  if kind == 's' then
    job = rest
  elseif kind == 'r' then
    gen, sched, attempt, stalls, job = string.match(rest, '^(%d+)|(%d+)|(%d+)|(%d+)|(.*)$')
  end
  if not job then
    event(now, 'quarantined', '', nil, nil, 'malformed due entry: ' .. member)
    push_capped(P .. 'quarantine', member, 1000)
    return false
  end
  local jk = jkey(job)
  local f = fields(jk, 'gen', 'cancelled', 'e', 'paused', 'kind', 'def', 'running',
    'overlap', 'misfire', 'next', 'k', 'anchor', 'interval', 'grace', 'queued', 'window',
    'after', 'replan', 'go')
  if not f.gen or f.cancelled == '1' then return false end          -- gone or cancelled
  job_running = tonumber(f.running)
  if kind == 's' and f.e ~= seq then return false end               -- replaced: stale
  if kind == 'r' and f.gen ~= gen then return false end             -- old generation
  if kind == 'r' then redis.call('HINCRBY', jk, 'retries', -1) end
  if f.paused == '1' then                                           -- paused: stash it
    local score = kind == 's' and tonumber(f.next) or now
    redis.call('HSET', jk, 'stash', (redis.call('HGET', jk, 'stash') or '') ..
      fmt(score) .. ' ' .. member .. '\n')
    if kind == 'r' then redis.call('HINCRBY', jk, 'retries', 1) end
    return false
  end
  if kind == 'r' then
    issue(job, jk, gen, tonumber(sched), tonumber(attempt), tonumber(stalls), f.def)
    return true
  end
  if f.kind ~= 'every' and f.kind ~= 'cron' then
    issue(job, jk, f.gen, tonumber(f.next), 1, 0, f.def, 'e', '')
    return true
  end
  redis.call('HSET', jk, 'e', '')
  local busy = tonumber(f.running) > 0 and f.overlap ~= 'allow'
  local window = int(f.window or '')
  local t, run
  if f.kind == 'cron' then
    t = tonumber(f.next)
    if busy and f.misfire == 'catch_up' then  -- catch_up skips nothing: park the series
      redis.call('HSET', jk, 'queued', fmt(t) .. '|0')
      return false
    end
    local decided, skip = cron_step(f, t, window)
    if not decided then                       -- a replica must apply the policy
      redis.call('HSET', jk, 'replan', '1')
      wait_for_plan(job, lane)
      return false
    end
    if skip then record_skip_at(now, job, t, t, 1, skip) else run = t end
    redis.call('HSET', jk, 'after', '', 'go', '')
    push_series(job, lane, tonumber(f.after), 0)
    plans[#plans + 1] = job
  else
    local k, anchor, iv, grace = tonumber(f.k), tonumber(f.anchor), tonumber(f.interval),
      tonumber(f.grace)
    if busy and f.misfire == 'catch_up' then  -- catch_up skips nothing: park the series
      redis.call('HSET', jk, 'queued', fmt(occ(anchor, iv, k)) .. '|' .. fmt(k))
      return false
    end
    local run_k, next_k, skip_from, skip_to, reason =
      plan(anchor, iv, k, now, f.misfire, grace, window)
    if skip_from then record_skip(now, job, anchor, iv, skip_from, skip_to, reason) end
    push_series(job, lane, occ(anchor, iv, next_k), next_k)
    if run_k then run = occ(anchor, iv, run_k) end
  end
  if not run then return false end
  if busy then
    if f.overlap == 'queue' and (not f.queued or f.queued == '') then
      redis.call('HSET', jk, 'queued', fmt(run) .. '|')
    else
      local why = f.overlap == 'skip' and 'overlap' or 'overlap-queue-full'
      record_skip_at(now, job, run, run, 1, why)
    end
    return false
  end
  issue(job, jk, f.gen, run, 1, 0, f.def)
  return true
end

local left = {}
for _, lc in ipairs(caps) do
  local lane, cap = lc[1], lc[2]
  local budget = cap * 4 + 16          -- bound the work of one call (stale entries)
  while cap > 0 and budget > 0 do
    -- at most min(cap, budget) members, so every member fetched is decided in this round
    local due = redis.call('ZRANGEBYSCORE', P .. 'due:' .. lane, '-inf', now, 'LIMIT', 0,
      math.min(cap, budget))
    if #due == 0 then break end
    redis.call('ZREM', P .. 'due:' .. lane, unpack(due))
    for _, member in ipairs(due) do
      budget = budget - 1
      if admit(lane, member) then cap = cap - 1 end
    end
  end
  if cap > 0 then left[#left + 1] = lane end
end
write_claims()

-- 3. when to ask again
local nxt = -1
for _, lane in ipairs(left) do
  local head = redis.call('ZRANGE', P .. 'due:' .. lane, 0, 0, 'WITHSCORES')
  if head[2] and (nxt < 0 or tonumber(head[2]) < nxt) then nxt = tonumber(head[2]) end
end
local lh = redis.call('ZRANGE', P .. 'lease', 0, 0, 'WITHSCORES')
if lh[2] and (nxt < 0 or tonumber(lh[2]) < nxt) then nxt = tonumber(lh[2]) end
if lease then redis.call('SET', P .. 'replica:' .. owner, fmt(now), 'PX', lease * 3) end

local epoch = redis.call('GET', P .. 'epoch') or ''
local reply = cjson.encode({now = now, next = nxt, claims = claims, epoch = epoch,
  fence = fence_before, plan = plans})
redis.call('SET', P .. 'claimed:' .. owner, req .. '\n' .. reply, 'PX', 60000)
return reply
