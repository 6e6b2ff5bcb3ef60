-- include/plain.lua: the common case read the short way. A plain one-off (nothing
-- cancelled, paused, queued or retried) is what most claims and acks meet;
-- include/check.lua's read_job takes a field list's `plain` reader first. Each reads the
-- HMGET reply by place (CLAIM_FIELDS of include/inspect.lua, success_fields() of
-- include/commit.lua), with the rules of include/rules.lua, and returns what the general
-- way returns (take_fields: present fields, DEFAULTS), or nil to leave the job to it: it
-- never accepts what the general way refuses (tests/lua/test_plain_reads.py).
-- Provides: PLAIN
-- Key families: layout

--@include rules

local PLAIN = {}

-- A pending one-off as add writes it: nothing cancelled, paused or running.
function PLAIN.claim(got)
  local gen, cancelled, e, paused, kind, def, running, nxt, ready = unpack(got)
  if cancelled or paused or running or not (kind == 'after' or kind == 'at') then return nil end
  local R = RULE
  if not (gen and e and def and nxt and R.gen(gen) and R.e(e) and R.def(def) and R.next(nxt)) or
      (ready and not R.ready(ready)) then
    return nil
  end
  return {gen = gen, e = e, kind = kind, def = def, running = '0', next = nxt, ready = ready or nil}
end

-- A one-off's only run as its claim left it: running once; nothing queued, paused,
-- cancelled, retried or recorded yet.
function PLAIN.success(got)
  local gen, cancelled, lane, queued, paused, kind, e, retries, running, runs, failures, lists,
    started, keep = unpack(got)
  if cancelled or queued or paused or retries or runs or failures or lists or started or
      running ~= '1' or e ~= '' or not (kind == 'after' or kind == 'at') then
    return nil
  end
  local R = RULE
  if not (gen and R.gen(gen)) or (lane and not R.lane(lane)) or (keep and not R.keep(keep)) then
    return nil
  end
  return {gen = gen, lane = lane or 'default', kind = kind, e = e, retries = '0', running = '1',
    keep = keep or nil}
end
