-- include/events.lua: the event stream (capped at ~10,000 events) and its counters, one
-- per event kind. An entry is one state change (fields kind, job, sched, attempt, detail,
-- at; a claim may add ready), or all the changes of one kind that one batch script call
-- made (fields kind, detail, at, n, batch: n lines "<sched>|<attempt>|<ready>|<job>",
-- ready empty unless later than sched, attempt empty for a change of no invocation, as
-- add.lua's `scheduled`; docs/operating.md). Every reader expands both forms through
-- one parser (scheduler/stores/redis/protocol/records.py, `events`). Batch scripts add counters up
-- and write their entries and counters once per call (flush_tally).
-- stats also holds `live`, the namespace's count of live jobs (lua/README.md), and
-- `live_since`, when that count started (absent: no count, e.g. an older namespace).
-- Provides: events_ok, count_live, xadd_event, event, tally, kinds_seen, event_tallied,
--   flush_tally
-- Key families: layout, events, stats

--@include core

-- Checked once per call: the stream and the counters of the event kinds `...` that the
-- script may write (HINCRBY fails on a counter that is not an integer), and `live`.
local function events_ok(...)
  local bad = expect(P .. 'events', 'stream')
  if bad then return bad end
  local kinds = {'live', ...}
  local got = redis.pcall('HMGET', P .. 'stats', unpack(kinds))  -- an error: not a hash
  if got['err'] then return expect(P .. 'stats', 'hash') or got end
  for i = 1, #kinds do
    if got[i] and not (#got[i] <= 18 and string.match(got[i], '^%-?%d+$')) then
      return corrupt_key(P .. 'stats', 'field ' .. kinds[i] .. ' is not an integer, expected an integer')
    end
  end
  return nil
end

-- The live count moved by `n` (a job created or made live again: +1; retired, deleted or
-- moved aside: -1); checked by events_ok.
local function count_live(n)
  if n ~= 0 then redis.call('HINCRBY', P .. 'stats', 'live', n) end
end

-- `ready` (claimed events, when later than `sched`): when the job became claimable.
local function xadd_event(now, kind, job, sched, attempt, detail, ready)
  local f = {'kind', kind, 'job', job, 'sched', sched and fmt(sched) or '',
    'attempt', attempt and fmt(attempt) or '', 'detail', detail or '', 'at', fmt(now)}
  if ready then f[#f + 1], f[#f + 2] = 'ready', fmt(ready) end
  redis.call('XADD', P .. 'events', 'MAXLEN', '~', 10000, '*', unpack(f))
end

local function event(now, kind, job, sched, attempt, detail)
  xadd_event(now, kind, job, sched, attempt, detail)
  redis.call('HINCRBY', P .. 'stats', kind, 1)
end

-- Batch scripts: the same event, kept in `tally` (per kind) and written by flush_tally()
-- before the script returns: one entry and one HINCRBY per kind instead of per job (`line`:
-- its batch line "<sched>|<attempt>|<ready>|<job>" if the caller formatted it; then `sched`
-- and `attempt` may be their digits as stored: fmt formats those the same). One
-- whose time or detail differs from its kind's first, or whose job id holds a newline
-- (corrupt data), is written on its own at once (and still counted).
--@call
local tally, kinds_seen = {}, {}
--@end
local function event_tallied(now, kind, job, sched, attempt, detail, ready, line)
  local b = tally[kind]
  if not b then
    b = {n = 0, now = now, detail = detail or '', lines = {}}
    tally[kind] = b
    kinds_seen[#kinds_seen + 1] = kind
  end
  b.n = b.n + 1
  if now ~= b.now or (detail or '') ~= b.detail or string.find(job, '\n', 1, true) then
    xadd_event(now, kind, job, sched, attempt, detail, ready)
    return
  end
  local l = b.lines
  if #l == 0 then b.one = {job, sched, attempt, ready} end
  l[#l + 1] = line or (fmt(sched) .. '|' .. fmt(attempt) .. '|' .. (ready and fmt(ready) or '') ..
    '|' .. job)
end

local function flush_tally()
  for _, kind in ipairs(kinds_seen) do
    local b = tally[kind]
    if #b.lines == 1 then  -- one change: the single form
      local o = b.one
      xadd_event(b.now, kind, o[1], o[2], o[3], b.detail, o[4])
    elseif #b.lines > 1 then  -- ~10,000 events: an entry of n trims to 10,000/n entries
      local cap = math.max(100, math.floor(10000 / #b.lines))
      redis.call('XADD', P .. 'events', 'MAXLEN', '~', cap, '*', 'kind', kind, 'detail',
        b.detail, 'at', fmt(b.now), 'n', fmt(#b.lines), 'batch', table.concat(b.lines, '\n'))
    end
    redis.call('HINCRBY', P .. 'stats', kind, b.n)
  end
  tally, kinds_seen = {}, {}
end
