-- include/job.lua: a job's hash: its key, its field defaults, a read that applies them, and
-- the due member of its series entry (JOB.fields, JOB.member; its small fields: include/st.lua).
-- Provides: jkey, DEFAULTS
-- Key families: layout, job:<job_id>

--@include core
--@include st

local function jkey(job) return P .. 'job:' .. job end

-- Job hash fields are written only when they differ from these defaults (a pending
-- one-off job's hash is small enough for Redis's compact listpack encoding).
local DEFAULTS = {lane = 'default', k = '0', running = '0', retries = '0', misfire = 'skip',
  overlap = 'skip', delivery = 'at_least_once', max_stalls = '3'}

-- HMGET with defaults: returns a table field -> value (missing fields: DEFAULTS or nil).
function JOB.fields(jk, ...)
  local names = {...}
  local got = JOB.hmget(jk, names, redis.call)
  local out = {}
  for i, name in ipairs(names) do
    local v = got[i]
    if v == false then v = DEFAULTS[name] end
    out[name] = v
  end
  return out
end

-- The due member of a job's series entry, from the job hash field `e` (its seq).
function JOB.member(job, e)
  if e and e ~= '' then return e .. '|s|' .. job end
  return nil
end
