-- include/job.lua: a job's hash: its key, its field defaults, a read that applies them,
-- and the due member of its series entry.
-- Provides: jkey, DEFAULTS, fields, series_member
-- Key families: layout, job:<job_id>

--@include core

local function jkey(job) return P .. 'job:' .. job end

-- Job hash fields are written only when they differ from these defaults (a pending
-- one-off job's hash is small enough for Redis's compact listpack encoding).
local DEFAULTS = {lane = 'default', k = '0', running = '0', retries = '0', misfire = 'skip',
  overlap = 'skip', delivery = 'at_least_once', max_stalls = '3'}

-- HMGET with defaults: returns a table field -> value (missing fields: DEFAULTS or nil).
local function fields(jk, ...)
  local names = {...}
  local got = redis.call('HMGET', jk, unpack(names))
  local out = {}
  for i, name in ipairs(names) do
    local v = got[i]
    if v == false then v = DEFAULTS[name] end
    out[name] = v
  end
  return out
end

-- The due member of a job's series entry, from the job hash field `e` (its seq).
local function series_member(job, e)
  if e and e ~= '' then return e .. '|s|' .. job end
  return nil
end
