-- include/provenance.lua: a definition's trace context (its last member, "x":
-- scheduler/tracing.py) says where the enqueue came from, not what the job is: an upsert
-- whose definition differs from the live job's only in its trace context (another, or one
-- where the other has none) is unchanged (put(): anchor, pending occurrence and the
-- stored trace context kept), as JobSpec's equality does in process. Pure.
-- Provides: TRACE, untraced, same_job
-- Key families: none

local TRACE = ',"x":{'

-- `def` without its trace context member (itself if it has none).
local function untraced(def)
  local i = string.find(def, TRACE, 1, true)
  return i and string.sub(def, 1, i - 1) .. '}' or def
end

-- Do definitions `a` and `b` differ at most in their trace contexts? (No string work
-- unless one of them has one.)
local function same_job(a, b)
  if a == b then return true end
  if not string.find(a, TRACE, 1, true) and not string.find(b, TRACE, 1, true) then
    return false
  end
  return untraced(a) == untraced(b)
end
