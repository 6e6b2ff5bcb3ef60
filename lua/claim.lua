#!lua flags=allow-oom
-- claim.lua: reap expired leases, then claim up to N due invocations per lane under a
-- lease (the RUNNING transition). Each claim gets a fresh token and a fence number that
-- is greater than every earlier one. A recurring job's next occurrence (anchor + k*iv,
-- misfire policy applied) is written here, in the same step, so a series can be neither
-- lost nor doubled (calendar series: include/calendar.lua). A resend of the same
-- request returns the same reply. Decide, then write: every expired lease and every
-- fetched due member is inspected (parsed, its job's key type and fields checked) before
-- the first write that concerns it, and no member leaves its due set before its fate is
-- decided; one whose data does not parse is moved aside on its own (the quarantine,
-- include/aside.lua) and the rest are claimed normally. Task-aware: the claimant never
-- claims an invocation of a task it lacks; that member is left for a live replica that
-- serves its task, or waits until one claims (include/serve.lua). A namespace key of the
-- wrong type stops the call before any write ("ERR duetime corrupt <key> is a <type>, ...").
-- flags=allow-oom: a full Redis (noeviction) still drains what is due; what a claim adds
-- is bounded by the invocations in flight and freed by their commits (lua/README.md).
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, lease, running, fence, seq, wake, events, stats,
--   skips:<job_id>, dead:<job_id>, bf:<job_id>, quarantined, quarantined:<entry>, claimed:<owner>,
--   replica:<owner>, epoch, layout, dead-jobs, done:<state>, paused, runs:<job_id>, tasks,
--   parked, parked:<task>, levels:<lane>, turns:<level>, limits, flow:run, flow:held,
--   flow:win:<key>, flow:wait:<key>, waits, results, res:<invocation>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] owner id  ARGV[4] request id ([A-Za-z0-9-]+; resend detection: the last reply
--         per owner is kept for 60 s)  ARGV[5] lease ms ("" = no expiry)
-- ARGV[6] the tasks the owner serves: "*" (every task) or "\n<task>\n<task>...\n" (names
--         as definitions spell them, JSON-escaped without quotes; "\n": none)
-- ARGV[7] "<fence> <fence> ...": those the claim's earlier calls were handed ("" if none;
--         RedisStore claims again after writing plans: include/defer.lua, claimed_before)
-- ARGV[8..] lane, capacity pairs (capacity 0..1000)
-- Returns: flat text, which is also the resend record (claimed:<owner>; no second copy):
--          "<request id>\n<now> <next> <fence> <lease until> <claims> <plans> <epoch bytes>
--          <now us> <skips> [<fence>...]\n<epoch>", then per claim "<sched> <attempt> <fence>
--          <gen> <ready> <job bytes> <def bytes>\n<job><def>", per plan "<job bytes>
--          <at>\n<job>", per claim told of skips "<fence> <bytes>\n<first>|<last>|<count>|
--          <reasons>" (ms; parsed by claiming/claim_reply.py): "now us", the µs past "now";
--          the fences after <skips>: claims a rate limit counted (each starts soon or is
--          handed back: scheduler/flow.py); "next" (-1: nothing), for lanes with capacity
--          left and the next lease expiry (include/ask.lua; no task: leases only); "lease
--          until", -1 with no lease; "epoch", the namespace's epoch key ("": Redis lost its
--          data); "fence", the counter before this call (below one handed out: claims lost);
--          plans, calendar jobs the caller plans ("at": the claims before it, its place);
--          "ready", claimable since (lag from it); tokens "<owner>:<fence>"; or "ERR ..."

--@include core
--@include resend
--@include reap
--@include turns

local owner, req, lease, served = ARGV[3], ARGV[4], ARGV[5], ARGV[6] or ''
local prior = fence_set(ARGV[7] or '')  -- include/defer.lua
if owner == '' or not string.match(req, '^[%w%-]+$') then
  return redis.error_reply('ERR duetime bad-input owner')
end
if served ~= '*' and (#served > SERVES_MAX or not string.find(served, '^\n') or
    not string.find(served, '\n$')) then
  return redis.error_reply('ERR duetime bad-input tasks')
end
if lease ~= '' and not (int(lease) and int(lease) > 0) then
  return redis.error_reply('ERR duetime bad-input lease')
end
if prior == false then return redis.error_reply('ERR duetime bad-input fences') end
local caps = {}
for i = 8, #ARGV, 2 do
  local n = int(ARGV[i + 1])
  if not n or n < 0 or n > 1000 or ARGV[i] == '' then  -- one call stays short
    return redis.error_reply('ERR duetime bad-input capacity')
  end
  caps[#caps + 1] = {ARGV[i], n}
end

local resent = resent_reply(owner, req)
if resent then return resent end   -- a resend: same reply, nothing claimed twice

-- the namespace keys this call may touch, once, before its first write
local epoch = redis.pcall('GET', P .. 'epoch')  -- the reply's; its type, checked here
local corrupt = running_ok() or aside_ok() or seq_ok() or serves_ok() or
  (type(epoch) == 'table' and expect(P .. 'epoch', 'string')) or
  events_ok('claimed', 'quarantined', 'skipped', 'lease_lost', 'abandoned', 'dead_lettered',
    'requeued')
local lanes = {}  -- the lanes this call claims
for _, lc in ipairs(caps) do corrupt, lanes[lc[1]] = corrupt or lane_ok(lc[1]), true end
local fence, bad_fence = expect_int(P .. 'fence')
corrupt = corrupt or bad_fence
if corrupt then return corrupt end

local now, now_us = now_ms_us()
lease = int(lease)
local fence_before = tonumber(fence or '0')

-- 1. expired leases: attempt+1 (at-least-once), abandoned (at-most-once) or dead letter
corrupt = reap(now)
if corrupt then return corrupt end  -- a due set a retry would go to: nothing written yet

-- 2. jobs that waited for a replica serving their task, of lanes this call claims: due again
if served ~= '\n' then unpark(served, lanes, 1000) end

-- 3. claim, lane by lane; the batch's fences, RUNNING entries and leases are written once
local b = new_batch(owner, now, lease, fence_before)
b.serves, b.passed, b.prior = served, {}, prior
-- (a deferred occurrence is asked for again when the run it waits for ends: its poke)
local left = claim_lanes(b, caps)  -- include/turns.lua: a lane's own due set, or its flow queues
write_claims(b)

-- 4. when to ask again; this replica is alive, and serves these tasks
local nxt = ask_next(now, served ~= '\n' and left or {}, b.passed, b)  -- no task: leases only
if lease then redis.call('SET', P .. 'replica:' .. owner, fmt(now), 'PX', lease * 3) end
register_serves(owner, served)

-- 5. the reply, kept as the resend record (include/resend.lua): joined once, plans last
local parts = b.claims
epoch = epoch or ''  -- none: Redis lost its data
table.insert(parts, 1, string.format('%s\n%d %d %d %d %d %d %d %d %d%s\n', req, now, nxt,
  fence_before, lease and now + lease or -1, b.n, #b.plans, #epoch, now_us, #b.skips,
  #b.rated > 0 and ' ' .. table.concat(b.rated, ' ') or '') .. epoch)
plan_records(b, parts)  -- include/calendar.lua; then the skips runs are told of
for _, s in ipairs(b.skips) do parts[#parts + 1] = s end
return remember_reply(owner, table.concat(parts))
