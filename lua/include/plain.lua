-- include/plain.lua: the common case read and written the short way. A plain one-off
-- (nothing cancelled, paused, queued or retried) is what most claims and acks meet;
-- include/check.lua's read_job offers a field list's `plain` reader the raw reply first:
-- the fields of the list not in st (here `def` or `lane`), then st (include/st.lua). Each
-- matches st with one pattern of the plain case (st's values in JOB.ST's order: gen, kind, e,
-- next, ready, running, attempts, cancelled, paused, queued, retries, runs, failures, lists,
-- started, keep), checks by the rules of include/rules.lua, and returns what the general
-- way returns (take_fields: present fields, DEFAULTS) or nil to leave the job to it: it
-- never accepts what the general way refuses (tests/lua/test_plain_reads.py). With the
-- fields, its plan: what the write that follows (claimed, succeeded) makes of st, as the
-- general way (JOB.set) would write it (tests/lua/test_packed_fields.py).
-- Provides: PLAIN
-- Key families: layout

--@include rules

local PLAIN = {}

-- A pending one-off as add writes it: nothing cancelled, paused, running or attempted.
function PLAIN.claim(got)
  local def, st = got[1], got[2]
  local gen, kind, e, nxt, ready, keep =
    string.match(st, '^(%d+),(%l+),(%x+),(%d+),(%d*),,,,,,,,,,,(%d*)$')
  if not (kind == 'after' or kind == 'at') then return nil end
  local R = RULE
  if not (def and R.gen(gen) and R.e(e) and R.def(def) and R.next(nxt)) or
      (ready ~= '' and not R.ready(ready)) then
    return nil
  end
  local f = {gen = gen, e = e, kind = kind, def = def, running = '0', next = nxt,
    ready = ready ~= '' and ready or nil}
  return f, {f = f, head = gen .. ',' .. kind .. ',,' .. nxt .. ',' .. ready, keep = keep}
end

-- Its st once claimed (include/issue.lua): running 1, attempt `a`, no pending occurrence.
function PLAIN.claimed(p, a) return p.head .. ',1,' .. a .. ',,,,,,,,,' .. p.keep end

-- A one-off's only run as its claim left it: running once; nothing queued, paused,
-- cancelled, retried or recorded yet.
function PLAIN.success(got)
  local lane, st = got[1], got[2]
  local gen, kind, nxt, ready, attempts, keep =
    string.match(st, '^(%d+),(%l+),,(%d*),(%d*),1,(%d*),,,,,,,,,(%d*)$')
  if not (kind == 'after' or kind == 'at') then return nil end
  local R = RULE
  if not R.gen(gen) or (lane and not R.lane(lane)) or (keep ~= '' and not R.keep(keep)) then
    return nil
  end
  local f = {gen = gen, lane = lane or 'default', kind = kind, e = '', retries = '0',
    running = '1', keep = keep ~= '' and keep or nil}
  return f, {f = f, head = gen .. ',' .. kind .. ',,' .. nxt .. ',' .. ready, keep = keep,
    attempts = attempts}
end

-- Its st once succeeded (include/retire.lua): running 0, runs 1.
function PLAIN.succeeded(p) return p.head .. ',0,' .. p.attempts .. ',,,,,1,,,,' .. p.keep end
