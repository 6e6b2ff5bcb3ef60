-- include/defer.lua: which due occurrences wait for a later claim. A claim (one claim.lua
-- call, or two or three when calendar plans make occurrences due: RedisStore claims again
-- with the fences its earlier calls were handed) leaves a series' due occurrence due when
-- the job was claimed in that claim, or has a re-run due: a free worker's next claim
-- judges it against the run then, as the in-process store does (docs/guarantees.md,
-- "Overlap"). A series re-run's claim stamps the job's `rerun` = its fence; an
-- occurrence's, `started` = "<fence>@<ms>" (include/issue.lua).
-- Provides: PRIOR_MAX, fence_set, claimed_before, defers
-- Key families: layout, job:<job_id>, due:<lane>

--@include job
--@include reruns

JOB.STARTED_READ = {'started', 'rerun'}  -- claimed_before's

local PRIOR_MAX = 1024 * 1024  -- the fence list: those of two earlier calls' claims, at most

-- The fences in `text` ("<fence> <fence> ..."), as a set; nil for none, false if `text`
-- is not such a list (or passes PRIOR_MAX bytes).
local function fence_set(text)
  if #text > PRIOR_MAX or not string.find(text, '^[%d ]*$') then return false end
  if text == '' then return nil end
  local set = {}
  for fence in string.gmatch(text, '%d+') do set[fence] = true end
  return set
end

-- Was series `job` claimed by an earlier call of the same claim (b.prior: the fences that
-- call was handed, claim.lua's fence list)? 'r' for a re-run (its job field `rerun`), true for
-- an occurrence (`started`), false for neither; kept in b.issued.
local function claimed_before(b, job)
  local g = JOB.hmget(jkey(job), JOB.STARTED_READ, redis.call)
  local got = (g[2] and b.prior[g[2]] and 'r') or
    (b.prior[string.match(g[1] or '', '^(%d+)@') or ''] and true) or false
  b.issued[job] = got
  return got
end

-- Would admitting inspected series member `x` be judged against a run of its job claimed
-- in this claim (call `b`, or an earlier call of the same claim: claimed_before) (overlap,
-- catch-up), or does a re-run of the job go first (one claimed in this claim, or listed as
-- due, whatever the overlap)? Then it waits for a later claim, as one claimed by a free
-- worker after that run ended would be judged (as in process: MemoryStore).
local function defers(b, x)
  local f = x.f
  if x.bad or not f or x.m.kind ~= 's' or (f.kind ~= 'every' and f.kind ~= 'cron') then
    return false
  end
  local got = b.issued[x.m.job]
  if got == nil and b.prior then got = claimed_before(b, x.m.job) end
  if got == 'r' or rerun_due(f, b.now) then return true end
  return got == true and (f.overlap ~= 'allow' or f.misfire == 'catch_up')
end
