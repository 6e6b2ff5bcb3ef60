-- include/provenance.lua: a definition's trace context (its last member, "x":
-- scheduler/tracing.py) says where the enqueue came from, not what the job is: an upsert
-- whose definition differs from the live job's only in its trace context (another, or one
-- where the other has none) keeps the stored text, so put() finds it unchanged (anchor,
-- pending occurrence and the stored trace context kept), as JobSpec's equality does in
-- process. A key put() would refuse is left to put() (read with pcall).
-- Provides: TRACE, untraced, keep_trace
-- Key families: layout, job:<job_id>

--@include job

local TRACE = ',"x":{'

-- `def` without its trace context member (itself if it has none).
local function untraced(def)
  local i = string.find(def, TRACE, 1, true)
  return i and string.sub(def, 1, i - 1) .. '}' or def
end

-- Job `a` (add_input's) takes the live job's stored definition if only their trace
-- contexts differ.
local function keep_trace(a)
  local got = redis.pcall('HMGET', jkey(a.job), 'def', 'cancelled', 'state')
  if type(got) ~= 'table' or got.err or type(got[1]) ~= 'string' or got[1] == a.def then return end
  local live = got[2] ~= '1' and (not got[3] or got[3] == '')
  if live and untraced(got[1]) == untraced(a.def) then a.def = got[1] end
end
