-- include/park.lua: jobs waiting for a replica that serves their task (include/serve.lua):
-- parked:<task> holds their due members, each with its score (due time and FIFO place
-- kept), and the set `parked` names the tasks that have some.
-- Provides: parked_ok, park, parked_key, drop_parked, unpark
-- Key families: layout, parked, parked:<task>, job:<job_id>, due:<lane>, seq, wake, tasks,
--   replica:<owner>, levels:<lane>, turns:<level>

--@include core
--@include job
--@include due
--@include serve
--@include flow

-- Can a member of task `tok` wait in parked:<tok>? (A key of another type: it stays due.)
local function parked_ok(tok) return expect(P .. 'parked:' .. tok, 'zset') == nil end

-- Due member `member` (scored `score`, already out of its due set) of task `tok` waits.
local function park(tok, member, score)
  redis.call('ZADD', P .. 'parked:' .. tok, score, member)
  redis.call('SADD', P .. 'parked', tok)
end

-- The waiting-jobs key of the job whose definition is `def`, if its task can be read and
-- the key is a sorted set (or absent); else nil.
local function parked_key(def)
  local tok = def and task_of(def)
  return tok and parked_ok(tok) and (P .. 'parked:' .. tok) or nil
end

-- Take the job's due member `member` (its definition `def`) out of the waiting jobs: true
-- if it was there (cancel, pause and delete find a waiting job there, not in its lane).
local function drop_parked(def, member)
  local key = member and parked_key(def)
  return key ~= nil and redis.call('ZREM', key, member) == 1
end

-- Waiting members of the tasks in `text` whose job's lane is in `lanes` (a set) go back
-- to their due sets, at most `limit` of them. Returns how many went back.
local function unpark(text, lanes, limit)
  local moved = 0
  for _, tok in ipairs(redis.call('SMEMBERS', P .. 'parked')) do
    local key = P .. 'parked:' .. tok
    if moved < limit and names_task(text, tok) and parked_ok(tok) then
      local got = redis.call('ZRANGE', key, 0, limit - moved - 1, 'WITHSCORES')
      local gone = {}
      for i = 1, #got, 2 do
        -- the lane of its job (no field, or a key of another type: the default lane,
        -- where admission moves it aside as it would have at its claim)
        local m = parse_member(got[i])
        local lane = m and redis.pcall('HGET', jkey(m.job), 'lane')
        if lane == false and redis.call('EXISTS', jkey(m.job)) == 0 then
          gone[#gone + 1] = got[i]                   -- its job is gone: dropped, as a claim would
        elseif type(lane) ~= 'string' then lane = DEFAULTS.lane end
        if type(lane) == 'string' and lanes[lane_of(lane)] and not lane_ok(lane) then
          due_add(lane, got[i + 1], got[i])
          gone[#gone + 1] = got[i]
        end
      end
      if #gone > 0 then
        redis.call('ZREM', key, unpack(gone))
        moved = moved + #gone
      end
      if redis.call('ZCARD', key) == 0 then redis.call('SREM', P .. 'parked', tok) end
    end
  end
  return moved
end
