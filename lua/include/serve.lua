-- include/serve.lua: task-aware claiming (docs/guarantees.md, "Which replica runs a job").
-- A claimant names the tasks it has registered: "*" (every task), or "\n<t1>\n<t2>\n...\n"
-- (names as definitions spell them: JSON-escaped, unquoted; "\n": none), recorded by each
-- claim in the hash `tasks` (owner -> text). A due member whose task the claimant lacks is
-- never claimed by it: it stays due while a live replica (replica:<owner> exists) serves the
-- task, else it waits in parked:<task> (same member and score: due time and FIFO place kept;
-- the set `parked` lists such tasks; include/park.lua) until a claimant serving the task
-- puts it back. Neither costs an attempt or a lease.
-- Provides: SERVES_MAX, serves_ok, names_task, task_of, SEEN, serves, served_elsewhere,
--   foreign, register_serves
-- Key families: layout, tasks, parked, replica:<owner>

--@include core

local SERVES_MAX = 1024 * 1024  -- the claimant's task list, at most

-- Namespace checks, before the first write.
local function serves_ok() return expect(P .. 'tasks', 'hash') or expect(P .. 'parked', 'set') end

-- Does task list `text` (the format above) name task `tok`?
local function names_task(text, tok)
  return text == '*' or string.find(text, '\n' .. tok .. '\n', 1, true) ~= nil
end

-- The task of definition `def` as it spells it (top-level "t"; only there is `"t":"`
-- outside a string), or nil (no such field: admission and the replica judge the definition).
local function task_of(def)
  local s = string.find(def, '"t":"', 1, true)
  if not s then return nil end
  local tok = string.match(def, '^([^"\\]*)"', s + 5)  -- a name without escapes: one pass
  if tok then return (#tok > 0 and #tok <= 1200) and tok or nil end
  local i, j = s + 5, s + 5
  while true do
    local q = string.find(def, '"', j, true)
    if not q then return nil end
    local k = q - 1
    while k >= i and string.byte(def, k) == 92 do k = k - 1 end  -- backslashes before it
    if (q - 1 - k) % 2 == 0 then
      local tok = string.sub(def, i, q - 1)
      return (#tok > 0 and #tok <= 1200) and tok or nil  -- a name is 1-200 characters
    end
    j = q + 1
  end
end

-- What one call learnt: does the claimant serve a task (mine), does a live replica other
-- than it (others: their task lists, read once) serve it (elsewhere); dead: replicas whose
-- live key expired, forgotten by register_serves.
--@call
local SEEN = {mine = {}, elsewhere = {}, others = nil, dead = {}}
--@end

-- Does the claimant (task list `text`) serve task `tok`?
local function serves(text, tok)
  if SEEN.mine[tok] == nil then SEEN.mine[tok] = names_task(text, tok) end
  return SEEN.mine[tok]
end

-- Does a live replica other than `owner` serve task `tok`?
local function served_elsewhere(owner, tok)
  if SEEN.elsewhere[tok] ~= nil then return SEEN.elsewhere[tok] end
  if not SEEN.others then
    SEEN.others = {}
    local all = redis.call('HGETALL', P .. 'tasks')
    for i = 1, #all, 2 do
      if all[i] == owner then                                      -- itself: skip
      elseif redis.call('EXISTS', P .. 'replica:' .. all[i]) == 1 then
        SEEN.others[#SEEN.others + 1] = all[i + 1]
      else
        SEEN.dead[#SEEN.dead + 1] = all[i]
      end
    end
  end
  local v = false
  for _, text in ipairs(SEEN.others) do v = v or names_task(text, tok) end
  SEEN.elsewhere[tok] = v
  return v
end

-- The task of inspected due member `x` (include/inspect.lua) when admission would make it a
-- claim but the claimant (b.serves) lacks that task; nil when admission decides it. A plain
-- look (include/plain.lua: x.plain) is a claim but for its task.
local function foreign(b, x)
  if b.serves == '*' or x.bad then return nil end
  local f, m = x.plain and x or x.f, x.m
  if not x.plain then
    if not f or f.cancelled == '1' or f.paused == '1' then return nil end
    if (m.kind == 's' and f.e ~= m.seq) or (m.kind == 'r' and f.gen ~= m.gen) then return nil end
  end
  local tok = f.def and task_of(f.def)
  if tok and not serves(b.serves, tok) then return tok end
  return nil
end

-- Record the claimant's task list `text` (when it changed) and forget replicas found dead.
local function register_serves(owner, text)
  if redis.call('HGET', P .. 'tasks', owner) ~= text then
    redis.call('HSET', P .. 'tasks', owner, text)
  end
  if #SEEN.dead > 0 then redis.call('HDEL', P .. 'tasks', unpack(SEEN.dead)) end
end
