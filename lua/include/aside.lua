-- include/aside.lua: the quarantine, one place for what is moved aside. An item whose data
-- does not parse is recorded in the `quarantined` hash (entry id -> JSON record: id, job,
-- reason, at, by, member, lane, score, type, running, token), the job key it names is
-- renamed to quarantined:<entry> as it was (any type; kept without expiry), and one
-- `quarantined` event counts it. The entry id is the job id when the item names one;
-- else "m:" .. 16 hex of sha1(due member), or "t:" .. 16 hex of sha1(token) for a lease or
-- RUNNING entry. If quarantined:<entry> already holds an earlier item, the job key stays in
-- place and the record's reason says so (the earlier data is never overwritten). A job
-- moved that was not retired leaves the live count (include/events.lua).
-- Provides: member_entry, token_entry, printable, aside_ok, move_aside
-- Key families: layout, job:<job_id>, events, stats, quarantined, quarantined:<entry>

--@include core
--@include job
--@include events
--@include utf8

local function member_entry(member) return 'm:' .. string.sub(redis.sha1hex(member), 1, 16) end
local function token_entry(token) return 't:' .. string.sub(redis.sha1hex(token), 1, 16) end

-- Text for a JSON record read as UTF-8: at most 1024 bytes (then "..."), and the bytes of
-- invalid UTF-8 written as \xHH.
local function printable(s)
  s = s or ''
  if #s > 1024 then s = string.sub(s, 1, 1024) .. '...' end
  if string.find(s, '[\128-\255]') and not utf8_ok(s) then
    s = (string.gsub(s, '[\128-\255]', function(c) return string.format('\\x%02x', string.byte(c)) end))
  end
  return s
end

-- Checked once per call by every script that may move something aside.
local function aside_ok() return expect(P .. 'quarantined', 'hash') end

-- Move item `q` aside, found by script `by` at `now`. `q`: id, job, reason, member, lane,
-- type, running, token (strings; "" unknown) and score (due ms; nil unknown).
local function move_aside(now, by, q)
  local reason, job = q.reason, q.job or ''
  if job ~= '' and q.id == job and redis.call('EXISTS', jkey(job)) == 1 then
    local data = P .. 'quarantined:' .. q.id
    if redis.call('EXISTS', data) == 0 then
      local state = redis.pcall('HGET', jkey(job), 'state')  -- a table: not a hash, counted
      if type(state) == 'table' or (state or '') == '' then count_live(-1) end
      redis.call('RENAME', jkey(job), data)
      JOB.forget(jkey(job))
      redis.call('PERSIST', data)
    else
      reason = reason .. '; not moved: quarantined:' .. q.id .. ' holds an earlier item, so ' ..
        'job:' .. job .. ' stays in place'
    end
  end
  local score = tonumber(q.score) or -1
  if score ~= score or score == math.huge or score == -math.huge then score = -1 end
  reason = printable(reason)
  redis.call('HSET', P .. 'quarantined', q.id, cjson.encode({id = q.id, job = printable(job),
    reason = reason, at = now, by = by, member = printable(q.member), lane = printable(q.lane),
    score = score, type = q.type or '', running = printable(q.running), token = printable(q.token)}))
  event(now, 'quarantined', job, nil, nil, reason)
end
