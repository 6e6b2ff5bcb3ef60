-- include/commit.lua: what complete, complete_many, fail and release decide before their
-- first write: the namespace keys they touch (once per call), then per invocation the
-- token check (include/tokens.lua) and its job's key type and fields (include/check.lua).
-- A RUNNING entry that does not parse, or a job whose data does not parse, is moved aside
-- (include/aside.lua) with the outcome the caller reported in its reason, its RUNNING
-- entry and lease dropped, and the caller is answered "quarantined": the outcome is
-- recorded there, and never reported as a lease loss.
-- A job deleted while an invocation ran (delete.lua keeps its RUNNING entry and lease) is
-- answered "not_found", its RUNNING entry and lease dropped: never a lease loss.
-- Provides: COMMIT_FIELDS, LANES_CHECKED, commit_guard, commit_plan, commit_aside, commit_code
-- Key families: layout, job:<job_id>, running, lease, events, stats, due:<lane>, seq, wake,
--   quarantined, quarantined:<entry>, flow:held, flow:run, flow:wait:<key>, flow:win:<key>,
--   levels:<lane>, limits, turns:<level>

--@include core
--@include events
--@include tokens
--@include due
--@include check
--@include aside

-- Every field a commit, with settle() after it, may parse.
local COMMIT_FIELDS = {'gen', 'cancelled', 'lane', 'queued', 'paused', 'kind', 'e', 'retries',
  'running', 'runs', 'failures', 'lists', 'started', 'stash', 'reruns', 'keep'}

-- Due sets found sound in this call (a batch of acks checks each lane once; nothing this
-- call writes can change a key's type).
local LANES_CHECKED = {}

-- The namespace keys of a commit that may write events of kinds `...`: nil if sound,
-- else the error reply.
local function commit_guard(...)
  return running_ok() or aside_ok() or seq_ok() or events_ok('quarantined', ...)
end

-- The plan for `token`'s commit of `job` (read only), given its token check (`r`, `code`,
-- `data`: as owned() returns them). `outcome`: what the caller reports ("succeeded", ...);
-- `extra(job)`: why a further key of the job cannot be written, or nil. Returns {r, f}
-- (commit: the invocation, and its job's checked fields), {code} (answer it with
-- commit_code; `gone`: the job was deleted while it ran), {q} (move it aside); or nil and
-- the error reply for a corrupt due set.
local function commit_plan(job, token, outcome, r, code, data, extra)
  if code == 'corrupt' then
    return {token = token, data = data or '', q = {id = token_entry(token), job = job, type = '',
      reason = 'malformed RUNNING entry; the invocation ' .. outcome}}
  end
  if not r then return {code = code} end
  local f, why, t = read_job(job, COMMIT_FIELDS)
  if not why and extra and extra(job) then  -- (checked even if the job is gone: it writes)
    why, t = 'malformed job data: ' .. extra(job), f and 'hash' or 'none'
  end
  if why then
    return {token = token, data = data or '', q = {id = job, job = job, type = t,
      reason = why .. '; the invocation of ' .. fmt(r.sched) .. ' (attempt ' .. fmt(r.attempt) ..
      ') ' .. outcome}}
  end
  if not f then return {code = 'not_found', gone = token} end  -- deleted while it ran
  if not LANES_CHECKED[f.lane] then
    local bad = lane_ok(f.lane)
    if bad then return nil, bad end
    LANES_CHECKED[f.lane] = true
  end
  return {token = token, data = data or '', r = r, f = f}
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

-- The answer of a plan that names a code; a deleted job's invocation ends here (its
-- RUNNING entry and lease are dropped).
local function commit_code(plan)
  if plan.gone then drop_running(plan.gone) end
  return plan.code
end
