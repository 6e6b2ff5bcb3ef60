-- include/keyrules.lua: the key rules' stamp, as an add checks it (docs/flow-control.md, "A
-- job's limit key"). A producer applies the namespace's key rules (`keyrules`, written by
-- rule.lua, which bumps `keyrules:stamp` with every change) to the jobs it adds and sends
-- the stamp of the rules it applied: a call whose stamp is not the namespace's is refused
-- whole, before its first write, and the producer reloads the rules and sends it again.
-- Provides: rules_stale
-- Key families: keyrules:stamp, layout

--@include core

-- nil if `stamp` (nil: none sent, an older caller: unchecked) is the namespace's ("0"
-- before any change), else the error reply: "ERR duetime stale-rules <the namespace's>",
-- or the corrupt one for a key of another type. One GET.
local function rules_stale(stamp)
  if not stamp then return nil end
  local key = P .. 'keyrules:stamp'
  local cur = redis.pcall('GET', key)
  if type(cur) == 'table' then
    return corrupt_key(key, 'is a ' .. redis.call('TYPE', key)['ok'] .. ', expected string')
  end
  if (cur or '0') == stamp then return nil end
  return redis.error_reply('ERR duetime stale-rules ' .. (cur or '0'))
end
