-- include/counters.lua: add.lua's read of the namespace's seq and gen counters before its
-- first write (one MGET), each checked as expect_int checks a counter.
-- Provides: counters
-- Key families: seq, gen, layout

--@include core

-- The seq and gen counters in one MGET (nil for a key of another type: then asked), each
-- checked as expect_int does: seq's value, or nil and the error reply.
local function counters()
  local keys = {P .. 'seq', P .. 'gen'}
  local got = redis.call('MGET', keys[1], keys[2])
  for i = 1, 2 do
    local bad = not got[i] and select(2, expect_int(keys[i]))
    if got[i] and not int(got[i]) then
      bad = corrupt_key(keys[i], 'is not an integer, expected an integer')
    end
    if bad then return nil, bad end
  end
  return got[1] or '0'
end
