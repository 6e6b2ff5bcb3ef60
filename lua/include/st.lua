-- include/st.lua: a job's small fields (most scripts read and write them) in one field `st`
-- (layout 4): their values in JOB.ST's order (JOB.AT: a name's place) joined by ',', '' where
-- one is absent (`e`: '' either way). No value a script writes holds ','. A job of layout 3 or
-- before keeps them as fields of their own, read so until its first write converts it. One
-- table, JOB, holds the reads and writes through st (claim.lua's main chunk nears 200 locals).
-- Provides: JOB
-- Key families: layout

--@include core

local JOB = {ST = {'gen', 'kind', 'e', 'next', 'ready', 'running', 'attempts', 'cancelled',
  'paused', 'queued', 'retries', 'runs', 'failures', 'lists', 'started', 'keep'},
  AT = {gen = 1, kind = 2, e = 3, next = 4, ready = 5, running = 6, attempts = 7,
    cancelled = 8, paused = 9, queued = 10, retries = 11, runs = 12, failures = 13, lists = 14,
    started = 15, keep = 16},
  PATTERN = '^([^,]*),([^,]*),([^,]*),([^,]*),([^,]*),([^,]*),([^,]*),([^,]*),([^,]*),' ..
    '([^,]*),([^,]*),([^,]*),([^,]*),([^,]*),([^,]*),([^,]*)$'}

-- `st`'s values, an array in JOB.ST's order; nil if `s` does not parse.
function JOB.parse(s)
  local v = {string.match(s, JOB.PATTERN)}
  if #v ~= #JOB.ST then return nil end
  return v
end

-- The HMGET fields a read of `names` asks for: those not in st, then st, kept in the list
-- (`names.q`: a library keeps a constant list's). JOB.known: job key -> st's values as this
-- call last read or wrote them (a write after a read writes st without reading it again; a
-- key deleted or renamed: JOB.forget); JOB.plain: job key -> a plain read's plan, till a write.
--@call
JOB.known, JOB.plain = {}, {}
--@end
function JOB.forget(jk) JOB.known[jk], JOB.plain[jk] = nil, nil end
function JOB.ask(names)
  if names.q then return names.q end
  local q = {list = {}, at = {}}
  for i, name in ipairs(names) do
    if not JOB.AT[name] then q.list[#q.list + 1] = name; q.at[i] = #q.list end
  end
  q.list[#q.list + 1] = 'st'
  q.st, names.q = #q.list, q
  return q
end

-- HMGET of job hash `jk`'s fields `names` with `call` (redis.call or redis.pcall: its error
-- table is returned as it is): a reply as HMGET's (a value or false per name, st's from st)
-- and st's values (nil: an earlier layout's job, or none); or nil and why st does not parse.
-- JOB.expand: the same from `got`, the reply to HMGET of JOB.ask(names)'s list (`q`).
function JOB.hmget(jk, names, call)
  local q = JOB.ask(names)
  local got = call('HMGET', jk, unpack(q.list))
  return got['err'] and got or JOB.expand(jk, names, got, q, call)
end
function JOB.expand(jk, names, got, q, call)
  local s = got[q.st]
  if not s then return call('HMGET', jk, unpack(names)) end
  local v = JOB.parse(s)
  if not v then return nil, 'field st is not ' .. #JOB.ST .. ' values joined by ","' end
  JOB.known[jk] = v
  local out, at, AT = {}, q.at, JOB.AT
  for i = 1, #names do
    local k, x = at[i], nil
    if k then x = got[k] else x = v[AT[names[i]]] end
    if x == '' and not k and names[i] ~= 'e' then x = false end
    out[i] = x
  end
  return out, v
end

-- st's values of job hash `jk`, and whether they were read from an earlier layout's fields
-- (the write converts the job). Only after a read that checked them (decide, then write).
function JOB.load(jk)
  if JOB.known[jk] then return JOB.known[jk], false end
  local s = redis.call('HGET', jk, 'st')
  if s then
    local v = JOB.parse(s)
    if not v then error('duetime: ' .. jk .. ' field st does not parse (it was not checked)') end
    return v, false
  end
  local got = redis.call('HMGET', jk, unpack(JOB.ST))
  for i = 1, #JOB.ST do got[i] = got[i] or '' end
  return got, true
end

function JOB.store(jk, v, old, ...)  -- (old: a job of an earlier layout, converted)
  redis.call('HSET', jk, 'st', table.concat(v, ','), ...)
  JOB.known[jk], JOB.plain[jk] = v, nil
  if old then redis.call('HDEL', jk, unpack(JOB.ST)); need_layout(LAYOUT_PACKED) end
end

-- HSET of job hash `jk`'s field, value pairs `...`: those of JOB.ST into st.
function JOB.set(jk, ...)
  local args, rest, v, old = {...}, {}, nil, false
  for i = 1, #args, 2 do
    local at = JOB.AT[args[i]]
    if at and not v then v, old = JOB.load(jk) end
    if at then v[at] = args[i + 1] else rest[#rest + 1] = args[i]; rest[#rest + 1] = args[i + 1] end
  end
  if v then JOB.store(jk, v, old, unpack(rest)) elseif #rest > 0 then redis.call('HSET', jk, unpack(rest)) end
end

-- HDEL of job hash `jk`'s fields `...`: those of JOB.ST emptied in st.
function JOB.del(jk, ...)
  local names, rest, v, old = {...}, {}, nil, false
  for i = 1, #names do
    local at = JOB.AT[names[i]]
    if at and not v then v, old = JOB.load(jk) end
    if at then v[at] = '' else rest[#rest + 1] = names[i] end
  end
  if v then JOB.store(jk, v, old) end
  if #rest > 0 then redis.call('HDEL', jk, unpack(rest)) end
end

-- HINCRBY of job hash `jk`'s field `name` (one of JOB.ST) by `by`: the new value, a number.
function JOB.incr(jk, name, by)
  local v, old = JOB.load(jk)
  v[JOB.AT[name]] = fmt((tonumber(v[JOB.AT[name]]) or 0) + by)
  JOB.store(jk, v, old)
  return tonumber(v[JOB.AT[name]])
end
