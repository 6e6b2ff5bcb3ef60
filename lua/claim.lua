#!lua
-- claim.lua: reap expired leases, then claim up to N due invocations per lane under a
-- lease (the RUNNING transition). Each claim gets a fresh token and a fence number that
-- is greater than every earlier one. A recurring job's next occurrence (anchor + k*iv,
-- misfire policy applied) is written here, in the same step, so a series can be neither
-- lost nor doubled. A resend of the same request returns the same reply.
--
-- KEYS: none declared; every key is built from ARGV[1] (one hash tag, one slot)
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] owner id          ARGV[4] request id ([A-Za-z0-9-]+; resend detection: the
--                           last reply per owner is kept for 60 s)
-- ARGV[5] lease ms ("" = no expiry)
-- ARGV[6..] lane, capacity pairs (capacity 0..1000)
-- Returns: JSON {now, next (ms, -1 = nothing), claims: [{j, s, a, t, f, l, g, def}], epoch}
--          "next" covers lanes with capacity left and the next lease expiry; "epoch" is
--          the namespace's epoch key ("" if missing: Redis lost its data).

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
local claims = {}
local fence, running_set, lease_add = nil, {}, {}
local job_running = 0  -- the job's `running` count, as admit() read it (issue() adds one)
local function issue(job, jk, gen, sched, attempt, stalls, def, ...)
  fence = (fence or tonumber(redis.call('GET', P .. 'fence') or '0')) + 1
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
    'overlap', 'misfire', 'next', 'k', 'anchor', 'interval', 'grace', 'queued')
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
  if f.kind ~= 'every' then
    issue(job, jk, f.gen, tonumber(f.next), 1, 0, f.def, 'e', '')
    return true
  end
  redis.call('HSET', jk, 'e', '')
  local busy = tonumber(f.running) > 0 and f.overlap ~= 'allow'
  local k, anchor, iv, grace = tonumber(f.k), tonumber(f.anchor), tonumber(f.interval),
    tonumber(f.grace)
  if busy and f.misfire == 'catch_up' then  -- catch_up skips nothing: park the series
    redis.call('HSET', jk, 'queued', fmt(occ(anchor, iv, k)) .. '|' .. fmt(k))
    return false
  end
  local run, next_k, skip_from, skip_to, reason = plan(anchor, iv, k, now, f.misfire, grace)
  if skip_from then record_skip(now, job, anchor, iv, skip_from, skip_to, reason) end
  push_series(job, lane, occ(anchor, iv, next_k), next_k)
  if not run then return false end
  if busy then
    if f.overlap == 'queue' and (not f.queued or f.queued == '') then
      redis.call('HSET', jk, 'queued', fmt(occ(anchor, iv, run)) .. '|')
    else
      local why = f.overlap == 'skip' and 'overlap' or 'overlap-queue-full'
      record_skip(now, job, anchor, iv, run, run, why)
    end
    return false
  end
  issue(job, jk, f.gen, occ(anchor, iv, run), 1, 0, f.def)
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
local reply = cjson.encode({now = now, next = nxt, claims = claims, epoch = epoch})
redis.call('SET', P .. 'claimed:' .. owner, req .. '\n' .. reply, 'PX', 60000)
return reply
