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
-- A claim's due member of such a job and an ack's success are decided the short way too
-- (PLAIN.look, PLAIN.acked: tests/lua/test_short_ways.py).
-- Provides: PLAIN
-- Key families: layout, job:<job_id>

--@include job
--@include rules

-- PENDING: st of a pending one-off: gen, kind, e, next (no leading 0: its text is its
-- number's), ready, keep
local PLAIN = {PENDING = '^(%d+),(%l+),(%x+),([1-9]%d*),(%d*),,,,,,,,,,,(%d*)$'}

-- A pending one-off as add writes it: nothing cancelled, paused, running or attempted.
function PLAIN.claim(got)
  local def, st = got[1], got[2]
  local gen, kind, e, nxt, ready, keep = string.match(st, PLAIN.PENDING)
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

-- Due member `member` (its score's text `score`) of claim batch `b`, when admission would
-- claim it as it is, unless its task is not served (include/serve.lua, foreign): the
-- member "<seq>|s|<job>" (ASCII) of a plain pending one-off (PLAIN.claim's case, its `e`
-- that seq), due. Read with the claim's one HMGET (`q`: CLAIM_FIELDS' list, def then st),
-- checked by the same rules, decided with no field table: its look for include/issue.lua's
-- PLAIN.issue {member, score, job, jk, def, gen, sched (its `next`, and as text `nxt`),
-- ready, head, keep, plain}; else nil, and the reply if it was read (read_job takes it).
function PLAIN.look(b, member, score, q)
  local seq, job = string.match(member, '^(%x+)|s|([^\128-\255]+)$')
  if not seq or #seq > 16 or #member > 2048 then return nil end
  local jk = jkey(job)
  local raw = redis.pcall('HMGET', jk, unpack(q.list))
  local def, st = raw[1], raw[2]
  if not st then return nil, raw end  -- (an error reply too: read_job names the key's type)
  local gen, kind, e, nxt, ready, keep = string.match(st, PLAIN.PENDING)
  if e ~= seq or not def or not (kind == 'after' or kind == 'at') or #gen > 16 or #nxt > 15 or
      #ready > 16 or not RULE.def(def) then
    return nil, raw
  end
  local sched = tonumber(nxt)
  if sched > b.now then return nil, raw end  -- scored early: admission puts it back
  return {member = member, score = score == nxt and sched or tonumber(score),  -- (its text)
    job = job, jk = jk, def = def, gen = gen, sched = sched, nxt = nxt, ready = ready,
    head = gen .. ',' .. kind .. ',,' .. nxt .. ',' .. ready, keep = keep, plain = true}, raw
end

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
function PLAIN.succeeded(p) return p.head .. ',0,' .. p.attempts .. ',,,,,1,,,,' .. (p.keep or '') end

-- The success of `job` (its RUNNING entry `data`, read before) when it ends a plain
-- one-off's only run, decided the short way (complete_many.lua: no lease expired, nobody
-- waits for a result): the entry "<gen>|<sched>|<attempt>|<stalls>|<fence>|<job>" of this
-- very job (ASCII, no kept ready; each number of 16 digits at most, as parse_running's), the
-- job PLAIN.success's case without a `keep`, read with the ack's one HMGET (`q`: its list,
-- lane then st). Returns one table: the run (sched_text, attempt_text), the fields
-- PLAIN.success returns and its plan (JOB.plain; `f`: itself); else nil, and the reply if
-- it was read (commit_fields takes it: one read an item either way).
function PLAIN.acked(job, data, q)
  if not data or #data > 2048 then return nil end
  local g, s, a, stalls, fence, who =  -- (its gen: the job's st says the job's)
    string.match(data, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^\128-\255]+)$')
  if who ~= job or #g > 16 or #s > 16 or #a > 16 or #stalls > 16 or #fence > 16 then
    return nil
  end
  local jk = jkey(job)
  local raw = redis.pcall('HMGET', jk, unpack(q.list))
  local lane, st = raw[1], raw[2]
  if not st then return nil, raw end
  local gen, kind, nxt, ready, attempts =
    string.match(st, '^(%d+),(%l+),,(%d*),(%d*),1,(%d*),,,,,,,,,$')
  if not (kind == 'after' or kind == 'at') or #gen > 16 or (lane and not RULE.lane(lane)) then
    return nil, raw
  end
  local x = {gen = gen, lane = lane or 'default', kind = kind, e = '', retries = '0',
    running = '1', head = gen .. ',' .. kind .. ',,' .. nxt .. ',' .. ready, attempts = attempts,
    sched_text = s, attempt_text = a, f = false}
  x.f, JOB.known[jk], JOB.plain[jk] = x, nil, x
  return x
end
