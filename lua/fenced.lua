#!lua
-- fenced.lua: write the caller's own key only while the invocation's fence is the newest
-- its ledger has seen for that occurrence. The ledger keeps, per invocation id, the highest
-- fence that wrote: a lower fence is refused and nothing is written; an equal or higher
-- one raises it and the write is applied as an upsert keyed by the invocation (set and
-- hset overwrite; xadd adds the invocation's one entry, once). Decide, then write: the
-- input, both key types and the ledger entry are checked before the first write.
-- Unlike the namespace's scripts, its keys are the caller's and come as KEYS (Redis
-- Cluster checks that they share a slot); it includes no unit (no prefix, no layout).
--
-- KEYS[1]: the caller's key: a string (set), a hash (hset) or a stream (xadd)
-- KEYS[2]: its ledger, a hash: invocation id -> highest fence; for xadd also
--          "<invocation id> xadd" -> the id of the entry the invocation added
-- Key families: none
-- ARGV[1] invocation id "<job_id>@<scheduled_ms>"   ARGV[2] fence (an integer >= 0)
-- ARGV[3] what to write: set | hset | xadd
-- ARGV[4] ms to keep the ledger after this write ("" = no expiry)
-- ARGV[5..] set: the value, then a PX ms or ""; hset, xadd: field, value, ...
-- Returns: {"ok", fence} (set, hset), {"ok", fence, entry id} (xadd: the entry added, or
--          the one this invocation added before); {"stale", newest fence}: refused,
--          nothing written; or an error reply "ERR duetime bad-input ..." (nothing written)

local WANT = {set = 'string', hset = 'hash', xadd = 'stream'}
local MAX_ARGS = 4000  -- unpack() of more would overflow Lua's C stack (8000 slots)

local function bad(what) return redis.error_reply('ERR duetime bad-input ' .. what) end

-- An integer >= 0 as the scripts write them: digits only, at most 16.
local function count(s)
  if type(s) == 'string' and #s <= 16 and string.find(s, '^%d+$') then return tonumber(s) end
  return nil
end

-- nil if `key` is of type `want` or absent, else the error reply.
local function typed(key, want)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= want then
    return bad('key ' .. key .. ' is a ' .. t .. ', expected a ' .. want)
  end
  return nil
end

-- The write's own arguments, checked: the list to send, or nil and the error reply.
local function operands(op)
  local args = {}
  for i = 5, #ARGV do args[#args + 1] = ARGV[i] end
  if op == 'set' then
    if #args ~= 2 or (args[2] ~= '' and not (count(args[2]) and count(args[2]) > 0)) then
      return nil, bad('set takes a value and a PX ms > 0 or ""')
    end
  elseif #args == 0 or #args % 2 ~= 0 or #args > MAX_ARGS then
    return nil, bad(op .. ' takes 1 to 2000 field, value pairs')
  end
  return args
end

if #KEYS ~= 2 then return bad('keys: the caller\'s key and its ledger') end
local key, ledger = KEYS[1], KEYS[2]
local inv, fence, op, keep = ARGV[1], count(ARGV[2]), ARGV[3], ARGV[4]
if not inv or inv == '' then return bad('invocation id') end
if not fence then return bad('fence') end
if not WANT[op] then return bad('operation') end
if keep ~= '' and not (count(keep) and count(keep) > 0) then return bad('ledger ms') end
local args, err = operands(op)
if err then return err end
err = typed(key, WANT[op]) or typed(ledger, 'hash')
if err then return err end

local seen = redis.call('HGET', ledger, inv)
if seen and not count(seen) then return bad('ledger ' .. ledger .. ' holds no fence for ' .. inv) end
if seen and tonumber(seen) > fence then return {'stale', tonumber(seen)} end

local added = nil
if op == 'xadd' then added = redis.call('HGET', ledger, inv .. ' xadd') end
redis.call('HSET', ledger, inv, ARGV[2])
if op == 'set' and args[2] ~= '' then
  redis.call('SET', key, args[1], 'PX', args[2])
elseif op == 'set' then
  redis.call('SET', key, args[1])
elseif op == 'hset' then
  redis.call('HSET', key, unpack(args))
elseif not added then
  added = redis.call('XADD', key, '*', unpack(args))
  redis.call('HSET', ledger, inv .. ' xadd', added)
end
if keep ~= '' then redis.call('PEXPIRE', ledger, keep) end
if op == 'xadd' then return {'ok', fence, added} end
return {'ok', fence}
