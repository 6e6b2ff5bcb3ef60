-- include/turns.lua: claim.lua's path for a lane with flow queues (include/flow.lua; in
-- process: scheduler/stores/memory/flow.py): priorities high to low; within one, queues
-- with due work take turns, one start each per round, by turn (then key, byte order; the
-- queue without a key first): one served goes behind the others (its turn: now), one held
-- back by a rate comes back when it allows, one at its concurrency waits in flow:wait:<key>
-- until an invocation of its key ends (include/limits.lua, flow_end_many).
-- Provides: next_turns, take, claim_level, claim_lanes
-- Key families: levels:<lane>, turns:<level>, limits, flow:run, flow:held, flow:win:<key>,
--   flow:wait:<key>, due:<lane>, wake, events, fence, job:<job_id>, layout, lease, parked,
--   parked:<task>, quarantined, quarantined:<entry>, replica:<owner>, running, seq,
--   skips:<job_id>, stats, tasks

--@include core
--@include flow
--@include limits
--@include queues
--@include inspect
--@include ask

-- After a round of `lane`'s priority `p`: each candidate's next turn (`tk`: their zset).
local function next_turns(b, lane, p, tk, cands, served, blocked)
  for _, c in ipairs(cands) do
    local key, bl = c[2], blocked[c[2]]
    local q = queue_of(lane, p, key)
    if bl and (bl[1] == 'planned' or (b.prior and not b.started[key])) then
      -- nothing: the claim's next call judges it; or a later call holds it back for the
      -- earlier calls' starts (in process one pass judged it before them: its turn stays)
    elseif bl and not head_of(q) then  -- empty: a push gives it a turn (include/flow.lua)
      redis.call('ZREM', tk, key)
    elseif bl then  -- a rate's next start, or its turn comes back with a slot (flow_end_many)
      redis.call('ZADD', tk, bl[1] == 'rate' and bl[2] or '+inf', key)
      if bl[1] ~= 'rate' then redis.call('SADD', P .. 'flow:wait:' .. key, q) end
    elseif served[key] then  -- behind the others (a claim's later script calls may serve
      local h = head_of(q)   -- it again); gone if it is empty
      if not h then
        redis.call('ZREM', tk, key)
      else  -- (the queue without a key is found by its first member: its turn only orders)
        redis.call('ZADD', tk, key == '' and b.now or math.max(h, b.now), key)
      end
    else  -- empty, or not yet due, or what is due waits (a run's end; a replica with its
      local h = head_of(q)  -- task): asked again within PASSED_RECHECK_MS (include/ask.lua)
      if h and key ~= '' then  -- (a claim's later call leaves the turn its first call set:
        if not (b.prior and h <= b.now) then  -- in process it is one call; include/defer.lua)
          redis.call('ZADD', tk, h > b.now and h or b.now + PASSED_RECHECK_MS, key)
        end
      else  -- the queue without a key is found by its first member: its turn only orders
        redis.call('ZREM', tk, key)
      end
    end
  end
end

-- Up to `want` places from queue `q` of limit key `key` ('': none): places taken (claims,
-- and series sent to be planned: include/admit.lua) and claims made, starts counted.
local function take(b, q, key, want)
  local n = b.n
  local took = want - claim_lane(b, q, want)
  local got = b.n - n
  if key ~= '' and got > 0 then  -- the claims' tokens: the batch's fences are consecutive
    b.started[key] = true
    local tokens = {}
    for i = got - 1, 0, -1 do tokens[#tokens + 1] = b.token_head .. fmt(b.fence - i) end
    if flow_started(key, q, tokens, b.now) then  -- the reply names them (claim.lua)
      for i = got - 1, 0, -1 do b.rated[#b.rated + 1] = fmt(b.fence - i) end
    end
  end
  return took, got
end

local function claim_level(b, lane, p, cap)
  local tk = P .. 'turns:' .. lane .. US .. fmt(p)
  local cands = candidates(b, lane, p, cap, tk)
  local served, done, blocked = {}, {}, {}
  local active = #cands  -- candidates not done; one alone takes what its room allows at once
  while cap > 0 and active > 0 and not b.held do
    for _, c in ipairs(cands) do
      local key = c[2]
      if b.held then  -- one not met yet keeps its turn: the claim's next call meets it
        if not served[key] and not done[key] then blocked[key] = {'planned'} end
      elseif cap > 0 and not done[key] then
        local room, why, at = math.huge, nil, nil
        if key ~= '' then room, why, at = flow_room(key, b.now, active == 1 and cap or 1) end
        local want = active == 1 and math.min(cap, room) or 1
        local took, got = 0, 0
        if room > 0 then took, got = take(b, queue_of(lane, p, key), key, want) end
        cap = cap - took
        if took > 0 then served[key] = true end
        if room <= 0 then blocked[key] = {why, at} end
        if took > got then  -- a series sent to be planned: the claim's next call claims it,
          blocked[key] = {'planned'}  -- its queue in its turn; under a limit, the rest of
          b.held = room < math.huge   -- the claim after it (in process: one pass, in order)
        end
        if room <= 0 or took < want or b.held then
          done[key], active = true, active - 1
        end
      end
    end
  end
  next_turns(b, lane, p, tk, cands, served, blocked)
  return cap
end

-- claim.lua's step 3: each lane of `caps` ({lane, capacity}) through its flow queues or
-- its own due set; the lanes with capacity left.
local function claim_lanes(b, caps)
  local left = {}
  b.flows, b.rated, b.started, b.held = {}, {}, {}, false
  for _, lc in ipairs(caps) do
    local lane, rest = lc[1], lc[2]
    local levels = flow_levels(lane)
    b.flows[lane] = levels
    for _, p in ipairs(levels or {}) do
      if rest > 0 and not b.held then rest = claim_level(b, lane, p, rest) end
    end
    if not levels and not b.held then rest = claim_lane(b, lane, rest) end
    if rest > 0 then left[#left + 1] = lane end
  end
  return left
end
