-- include/commit.lua: what complete, complete_many, fail and release decide before their
-- first write: the namespace keys they touch (once per call), then per invocation the
-- token check (include/tokens.lua) and its job's key type and fields (include/check.lua).
-- A RUNNING entry or a job whose data does not parse is moved aside (include/aside.lua) with
-- the outcome the caller reported in its reason, its RUNNING entry and lease dropped, and
-- the caller is answered "quarantined": the outcome is recorded there, never reported as a
-- lease loss. A job deleted while an invocation ran (delete.lua keeps its RUNNING entry
-- and lease) is answered "not_found", its RUNNING entry and lease dropped.
-- Provides: COMMIT_FIELDS, QUEUED_ONLY, SUCCESS_FIELDS, LANES_CHECKED, lane_checked,
--   commit_guard, REST, prefetched, commit_fields, commit_plan, commit_aside, commit_code
-- Key families: layout, job:<job_id>, running, lease, events, stats, due:<lane>, seq, wake,
--   quarantined, quarantined:<entry>, flow:held, flow:run, flow:wait:<key>, flow:win:<key>,
--   levels:<lane>, limits, turns:<level>

--@include core
--@include events
--@include tokens
--@include due
--@include check
--@include aside
--@include plain

-- Every field a commit, with settle() after it, may parse.
local COMMIT_FIELDS = {'gen', 'cancelled', 'lane', 'queued', 'paused', 'kind', 'e', 'retries',
  'running', 'runs', 'failures', 'lists', 'started', 'stash', 'reruns', 'keep'}

-- Of them, what only the release of a queued occurrence parses (settle, push_retry): a success
-- reads the others first (SUCCESS_FIELDS; a plain job the short way), these if it holds one.
-- One constant list (a library keeps what read_job derives from it: include/st.lua's ask).
local QUEUED_ONLY = {stash = true, reruns = true}
local SUCCESS_FIELDS = {'gen', 'cancelled', 'lane', 'queued', 'paused', 'kind', 'e', 'retries',
  'running', 'runs', 'failures', 'lists', 'started', 'keep', plain = PLAIN.success}

--@call
local LANES_CHECKED = {}  -- due sets found sound this call (no write of it changes a key's type)
--@end
-- The due set of `lane` checked, once a call: nil if sound, else the error reply.
local function lane_checked(lane)
  local bad = not LANES_CHECKED[lane] and lane_ok(lane)
  LANES_CHECKED[lane] = not bad
  return bad or nil
end

-- The namespace keys of a commit that may write events of kinds `...`: nil or the error.
local function commit_guard(...)
  return running_ok() or aside_ok() or seq_ok() or events_ok('quarantined', ...)
end

-- owned()'s token check on a RUNNING entry `data` read before (`expired`: any lease was),
-- read lean (parse_running's `rest`: numbers converted only if read, as few commits do).
local REST = {texts = {sched = 'sched_text', attempt = 'attempt_text', stalls = 'stalls_text',
  fence = 'fence_text'}}
function REST.__index(r, k)
  local text = REST.texts[k]
  if text then r[k] = tonumber(r[text]) return r[k] end
end
local function prefetched(now, job, token, data, expired)
  local r = parse_running(data, REST)
  local code = not_owned(job, token, r)
  if not code and expired then
    local deadline = redis.call('ZSCORE', P .. 'lease', token)
    if deadline and tonumber(deadline) <= now then code = 'lease_lost' end
  end
  if code then return nil, code, data else return r, nil, data end
end

-- What `token`'s commit of `job` is to do (read only), given its token check (`r`, `code`,
-- `data`: as owned() returns them). `outcome`: what the caller reports ("succeeded", ...);
-- `extra(job)`: why a further key of the job cannot be written, or nil; `names`: the
-- fields to read (default COMMIT_FIELDS), all of them again for a job that holds a queued
-- occurrence; `raw`: their HMGET reply, if the caller read it (include/plain.lua's acked).
-- Returns the job's checked fields (commit the invocation); or nil and the plan of another
-- end: {code} (answer it with commit_code; `gone`: the job was deleted while it ran), {q}
-- (move it aside); or nil, nil and the error reply for a corrupt due set.
local function commit_fields(job, token, outcome, r, code, data, extra, names, raw)
  if code == 'corrupt' then
    return nil, {token = token, data = data or '', q = {id = token_entry(token), job = job,
      type = '', reason = 'malformed RUNNING entry; the invocation ' .. outcome}}
  end
  if not r then return nil, {code = code} end
  local f, why, t = read_job(job, names or COMMIT_FIELDS, raw)
  if names and f and (f.queued or '') ~= '' then f, why, t = read_job(job, COMMIT_FIELDS) end
  if not why and extra and extra(job) then  -- (checked even if the job is gone: it writes)
    why, t = 'malformed job data: ' .. extra(job), f and 'hash' or 'none'
  end
  if why then
    return nil, {token = token, data = data or '', q = {id = job, job = job, type = t,
      reason = why .. '; the invocation of ' .. fmt(r.sched) .. ' (attempt ' .. fmt(r.attempt) ..
      ') ' .. outcome}}
  end
  if not f then return nil, {code = 'not_found', gone = token} end  -- deleted while it ran
  local bad = lane_checked(f.lane)
  if bad then return nil, nil, bad end
  return f
end

-- The same as one plan: {r, f} (commit it), {code} or {q}; or nil and the error reply.
local function commit_plan(job, token, outcome, r, code, data, extra)
  local f, plan, bad = commit_fields(job, token, outcome, r, code, data, extra)
  if f then return {token = token, data = data or '', r = r, f = f} end
  return plan, bad
end

-- Move planned item `plan` aside, found by script `by` (its RUNNING entry and lease are
-- dropped); the code to answer.
local function commit_aside(now, by, plan)
  local q = plan.q
  q.member, q.lane, q.running, q.token = '', '', plan.data, plan.token
  drop_running(plan.token)
  move_aside(now, by, q)
  return 'quarantined'
end

-- The answer of a plan that names a code (a deleted job's: its RUNNING entry and lease dropped).
local function commit_code(plan)
  if plan.gone then drop_running(plan.gone) end
  return plan.code
end
