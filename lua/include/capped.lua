-- include/capped.lua: capped lists, newest first (dead letters, skipped ranges, the
-- quarantine); the caller names the list.
-- Provides: push_capped
-- Key families: none

local function push_capped(key, value, cap)
  redis.call('LPUSH', key, value)
  redis.call('LTRIM', key, 0, cap - 1)
end
