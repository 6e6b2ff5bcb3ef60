-- include/events.lua: the event stream (capped at ~10,000 entries) and its counters, one
-- per event kind; batch scripts add counters up and write them once (flush_tally).
-- Provides: events_ok, xadd_event, event, tally, event_tallied, flush_tally
-- Key families: layout, events, stats

--@include core

-- Checked once per call: the stream and the counters of the event kinds `...` that the
-- script may write (HINCRBY fails on a counter that is not an integer).
local function events_ok(...)
  local bad = expect(P .. 'events', 'stream') or expect(P .. 'stats', 'hash')
  if bad then return bad end
  local kinds = {...}
  local got = redis.call('HMGET', P .. 'stats', unpack(kinds))
  for i = 1, #kinds do
    if got[i] and not (#got[i] <= 18 and string.match(got[i], '^%-?%d+$')) then
      return corrupt_key(P .. 'stats', 'field ' .. kinds[i] .. ' is not an integer, expected an integer')
    end
  end
  return nil
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

-- Batch scripts: the same event, with its counter added up in `tally` and written once
-- by flush_tally() before the script returns (one HINCRBY per kind instead of per job).
local tally = {}
local function event_tallied(now, kind, job, sched, attempt, detail, ready)
  xadd_event(now, kind, job, sched, attempt, detail, ready)
  tally[kind] = (tally[kind] or 0) + 1
end

local function flush_tally()
  for kind, n in pairs(tally) do redis.call('HINCRBY', P .. 'stats', kind, n) end
  tally = {}
end
