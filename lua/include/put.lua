-- include/put.lua: add.lua's path for one job: its 12 arguments checked (add_input), then
-- the job decided (include/replace.lua: the old job read and checked, or moved aside) and
-- written (put): a pending occurrence, its hash (only what differs from DEFAULTS) and one
-- `scheduled` event (put returns whether it wrote one: the script counts them in stats).
-- Provides: add_input, first_due, write_hash, put
-- Key families: layout, job:<job_id>, due:<lane>, seq, gen, lanes, wake, events, stats,
--   skips:<job_id>, dead:<job_id>, bf:<job_id>, runs:<job_id>, quarantined, quarantined:<entry>

--@include core
--@include job
--@include events
--@include due
--@include grid
--@include check
--@include aside
--@include replace

-- One job's 12 arguments (add.lua's groups), checked: a table; or nil and the error reply.
local function add_input(job, def, lane, kind, n, anchor, grace, misfire, overlap, delivery,
                         stalls, window)
  local a = {job = job, def = def, lane = lane, kind = kind, n = n, anchor = anchor,
    misfire = misfire, overlap = overlap, delivery = delivery, window = window or '',
    grace = int(grace), max_stalls = int(stalls), series = kind == 'every' or kind == 'cron',
    iv = kind == 'every' and interval_of(n)}
  local num = kind == 'every' and (a.iv and 1 or 0) or int(n)
  a.num, window, grace = num, a.window, a.grace
  if job == '' or def == '' or lane == '' or #job > FIELD_MAX or #lane > FIELD_MAX then
    return nil, redis.error_reply('ERR duetime bad-input id')
  end
  if #def > DEF_MAX then return nil, redis.error_reply('ERR duetime bad-input def') end
  if not num or not grace or grace < (kind == 'cron' and -1 or 0) or not a.max_stalls
      or a.max_stalls < 1 or (window ~= '' and not (int(window) and int(window) >= 0)) then
    return nil, redis.error_reply('ERR duetime bad-input number')
  end
  if not rule_ok('kind', kind) then return nil, redis.error_reply('ERR duetime bad-input kind') end
  if (a.series and num <= 0) or (kind == 'after' and num < 0) then
    return nil, redis.error_reply('ERR duetime bad-input interval')
  end
  if anchor ~= '' and not int(anchor) then
    return nil, redis.error_reply('ERR duetime bad-input anchor')
  end
  if not (rule_ok('misfire', misfire) and rule_ok('overlap', overlap)
      and rule_ok('delivery', delivery)) then
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

-- Job `a`'s hash in one HSET (a new generation; `seq`: its pending occurrence's), with only
-- what differs from DEFAULTS (include/job.lua); `lanes`: the lanes this call added.
local function write_hash(a, jk, old, lanes, seq, now, due, k, anchor)
  local set = {'def', a.def, 'kind', a.kind, 'gen', fmt(redis.call('INCR', P .. 'gen')),
    'e', seq, 'next', fmt(due)}
  local function opt(name, value)
    if value ~= DEFAULTS[name] then set[#set + 1] = name; set[#set + 1] = value end
  end
  opt('lane', a.lane); opt('delivery', a.delivery); opt('max_stalls', fmt(a.max_stalls))
  opt('running', old.running or '0')   -- invocations of a replaced definition may still run
  opt('k', fmt(k))
  if a.series then
    opt('misfire', a.misfire); opt('overlap', a.overlap)
    opt('grace', fmt(a.grace)); opt('since', fmt(due))
    if a.window ~= '' then opt('window', a.window) end
  end
  if anchor then opt('interval', a.n); opt('anchor', fmt(anchor)) end
  if a.kind == 'cron' and a.anchor ~= '' then opt('after', a.anchor) end
  if a.kind == 'at' and due < now then opt('ready', fmt(now)) end  -- lag from now
  redis.call('HSET', jk, unpack(set))
  if not lanes[a.lane] then redis.call('SADD', P .. 'lanes', a.lane); lanes[a.lane] = true end
  local lay = (a.iv and a.iv.b > 0) and LAYOUT_EXACT or LAYOUT  -- a fractional interval: layout 2
  if layout ~= lay and layout ~= LAYOUT_EXACT then redis.call('SET', P .. 'layout', lay); layout = lay end
end

-- Decide, then write job `a` at `now` (`up`: now rounded up): its outcome (created |
-- replaced | unchanged, or its error reply), due_in_ms (-1: none) and whether it wrote an event.
local function put(a, now, up, lanes)
  local job = a.job
  local old, bad, aside = read_old(job)
  if bad then return bad, -1, false end
  if aside then move_aside(now, 'add', aside) end
  local live = old.def and old.cancelled ~= '1' and (not old.state or old.state == '')
  if live and old.def == a.def then
    return 'unchanged', (old.e and old.e ~= '') and math.max(0, tonumber(old.next) - now) or -1, false
  end
  local jk, member = jkey(job), old.def and series_member(job, old.e)
  if member then redis.call('ZREM', P .. 'due:' .. old.lane, member) end
  redis.call('DEL', jk, P .. 'skips:' .. job, P .. 'dead:' .. job, P .. 'bf:' .. job, P .. 'runs:' .. job)
  local due, k, anchor = first_due(a, now, up)
  local seq = next_seq()  -- as push_series (include/due.lua), with the hash written at once
  write_hash(a, jk, old, lanes, seq, now, due, k, anchor)
  member = seq .. '|s|' .. job
  redis.call('ZADD', P .. 'due:' .. a.lane, due, member)
  wake_if_head(a.lane, member, due)
  local outcome = live and 'replaced' or 'created'
  xadd_event(now, 'scheduled', job, due, nil, outcome)
  return outcome, math.max(0, due - now), true
end
