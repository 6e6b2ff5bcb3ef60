-- include/put.lua: add.lua's path for one job: its 12 arguments checked (add_input), then
-- decided (include/replace.lua: the old job read and checked, or moved aside) and written
-- (put): a pending occurrence, its hash (what differs from DEFAULTS), its wake-up, an event.
-- Provides: add_input, first_due, opt, write_hash, put
-- Key families: layout, job:<job_id>, due:<lane>, seq, lanes, wake, events, stats, skips:<job_id>,
--   dead:<job_id>, bf:<job_id>, runs:<job_id>, quarantined, quarantined:<entry>, levels:<lane>, turns:<level>

--@include core
--@include job
--@include events
--@include due
--@include grid
--@include rules
--@include aside
--@include replace
--@include reruns
--@include flow
--@include provenance

-- One job's 12 arguments (add.lua's groups), checked: a table; or nil and the error reply.
local function add_input(job, def, lane, kind, n, anchor, grace, misfire, overlap, delivery,
                         stalls, window)
  local a = {job = job, def = def, lane = lane, kind = kind, n = n, anchor = anchor,
    misfire = misfire, overlap = overlap, delivery = delivery, window = window or '',
    grace = grace == '0' and 0 or int(grace), max_stalls = stalls == '3' and 3 or int(stalls),
    series = kind == 'every' or kind == 'cron', iv = kind == 'every' and interval_of(n)}
  local num = kind == 'every' and (a.iv and 1 or 0) or int(n)
  local w = a.window == '' or int(a.window)
  a.num, grace = num, a.grace
  if job == '' or def == '' or lane == '' or #job > FIELD_MAX or #lane > FIELD_MAX then
    return nil, redis.error_reply('ERR duetime bad-input id')
  end
  if #def > DEF_MAX then return nil, redis.error_reply('ERR duetime bad-input def') end
  if not num or not grace or grace < (kind == 'cron' and -1 or 0) or not a.max_stalls
      or a.max_stalls < 1 or not w or (w ~= true and w < 0) then
    return nil, redis.error_reply('ERR duetime bad-input number')
  end
  if not kind_ok(kind) then return nil, redis.error_reply('ERR duetime bad-input kind') end
  if (a.series and num <= 0) or (kind == 'after' and num < 0) then return nil, redis.error_reply('ERR duetime bad-input interval') end
  if anchor ~= '' and not int(anchor) then return nil, redis.error_reply('ERR duetime bad-input anchor') end
  if not (misfire_ok(misfire) and overlap_ok(overlap) and delivery_ok(delivery)) then
    return nil, redis.error_reply('ERR duetime bad-input policy')
  end
  return a
end

-- Job `a`'s first occurrence at `now` (`up`: now rounded up): its due ms, its index k in
-- the series, and a fixed-rate series' anchor.
local function first_due(a, now, up)
  local kind, num, anchor_arg = a.kind, a.num, a.anchor
  if kind == 'after' then return (num > 0 and up or now) + num, 0 end  -- 0: due now
  if kind ~= 'every' then return num, 0 end  -- at, cron: the first occurrence
  local anchor = anchor_arg == '' and up or int(anchor_arg)
  -- grid points after now, never before the anchor (the default anchor, now: one interval on)
  local k = math.max(anchor_arg == '' and 1 or 0, last_le(anchor, a.iv, now) + 1)
  return occ(anchor, a.iv, k), k, anchor
end

local function opt(set, name, value)  -- into HSET arguments `set` unless the default
  if value ~= DEFAULTS[name] then set[#set + 1] = name; set[#set + 1] = value end end

-- Job `a`'s hash in one HSET (generation `gen`; `seq`: its pending occurrence's), only what
-- differs from DEFAULTS, its small fields in st; `lanes`: the lanes this call added.
local function write_hash(a, jk, old, lanes, seq, gen, now, due, k, anchor)
  local set = {'def', a.def, 'st', ''}  -- st below, in JOB.ST's order (include/st.lua)
  opt(set, 'lane', a.lane); opt(set, 'delivery', a.delivery)
  opt(set, 'max_stalls', fmt(a.max_stalls)); opt(set, 'k', fmt(k))
  if a.series then
    opt(set, 'misfire', a.misfire); opt(set, 'overlap', a.overlap)
    opt(set, 'grace', fmt(a.grace)); opt(set, 'since', a.due_s)
    if a.window ~= '' then opt(set, 'window', a.window) end
  end
  if anchor then opt(set, 'interval', a.n); opt(set, 'anchor', fmt(anchor)) end
  if a.kind == 'cron' and a.anchor ~= '' then opt(set, 'after', a.anchor) end
  local ready = a.kind == 'at' and due < now and fmt(now) or ''  -- lag from now
  local rt = string.find(a.def, '"rt":', 1, true) and tonumber(string.match(a.def, '"rt":([%d%.]+)') or '')
  rt = rt and math.floor(rt * 1000 + 0.5)  -- result_ttl (s) as `keep` (ms), in RULE.keep's range
  rt = rt and rt >= 1000 and rt <= 2592000000 and fmt(rt) or ''  -- (RULE not built)
  set[4] = fmt(gen) .. ',' .. a.kind .. ',' .. seq .. ',' .. a.due_s .. ',' .. ready .. ',' ..
    (old.running ~= '0' and old.running or '') .. ',,,,,,,,,,' .. rt  -- (running: a replaced one's)
  redis.call('HSET', jk, unpack(set))
  JOB.forget(jk)
  local lane = lane_of(a.lane)  -- its queue is in `lane` (include/flow.lua)
  if not lanes[lane] then redis.call('SADD', P .. 'lanes', lane); lanes[lane] = true end
  need_layout(LAYOUT_PACKED)  -- its small fields in st (and a fractional interval: layout 2)
end

-- Decide, then write job `a` at `now` (`up`: now rounded up) for call `c`: c.lanes (the
-- lanes this call added), c.heads (as wake_new, include/due.lua), c.ids() (the write's seq and gen)
-- and c.batch (events tallied). Its outcome (created | replaced | unchanged, or its error
-- reply), due_in_ms (-1: none), whether it wrote an event and whether a live job was born.
local function put(a, now, up, c)
  local job, heads = a.job, c.heads
  local old, bad, aside = read_old(job)
  if bad then return bad, -1, false end
  if aside then move_aside(now, 'add', aside) end
  local live = old.def and old.cancelled ~= '1' and (not old.state or old.state == '')
  if live and same_job(old.def, a.def) then  -- a trace context aside (include/provenance.lua)
    return 'unchanged', pending_in(old, now), false  -- its occurrence or a re-run
  end
  local jk, member = jkey(job), old.def and JOB.member(job, old.e)
  if member then redis.call('ZREM', P .. 'due:' .. old.lane, member) end
  take_reruns(old.lane, old.reruns)  -- a replaced definition's runs never start
  if member or old.reruns then heads[old.lane] = nil end  -- its head may be gone: asked
  redis.call('DEL', jk, P .. 'skips:' .. job, P .. 'dead:' .. job, P .. 'bf:' .. job, P .. 'runs:' .. job)
  local due, k, anchor = first_due(a, now, up)
  a.due_s = fmt(due)  -- formatted once: the hash, the due member's score, the event
  local seq, gen = c.ids()
  write_hash(a, jk, old, c.lanes, seq, gen, now, due, k, anchor)
  member = seq .. '|s|' .. job
  due_add(a.lane, a.due_s, member)
  wake_new(heads, a.lane, member, due)
  local outcome = live and 'replaced' or 'created'
  if c.batch then
    event_tallied(now, 'scheduled', job, due, nil, outcome, nil, a.due_s .. '|||' .. job)
  else
    xadd_event(now, 'scheduled', job, due, nil, outcome)
  end
  return outcome, math.max(0, due - now), true, not (old.def and (old.state or '') == '')
end
