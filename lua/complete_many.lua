#!lua flags=allow-oom
-- complete_many.lua: record the success of a batch of claimed invocations (batched acks),
-- each with complete.lua's guarantee: token-checked, refused when its token no longer owns
-- the invocation or its lease has expired (a stale owner never commits); one refusal leaves
-- the others alone. A resend (or an item committed before) answers "ok" again and counts
-- once. Decide, then write: every item (RUNNING entry, job) is checked before the first
-- write; one that does not parse is moved aside on its own (include/commit.lua), the others
-- are recorded; a corrupt namespace key stops the call before any write.
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, lease, running, seq, wake, events, stats,
--   skips:<job_id>, dead:<job_id>, bf:<job_id>, quarantined, quarantined:<entry>, layout,
--   done:<state>, paused, runs:<job_id>, flow:held, flow:run, flow:wait:<key>, flow:win:<key>,
--   levels:<lane>, limits, turns:<level>, waits, results, res:<invocation>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3..] job id, token, result (JSON text, opaque) triples; at most 1000 of them
-- Returns: one code per triple, in order: "ok" | "lease_lost" | "not_found" |
--          "quarantined" (as complete.lua); or an error reply "ERR duetime corrupt ..."

--@include core
--@include job
--@include events
--@include tokens
--@include retire
--@include settle
--@include commit
--@include history
--@include told

if #ARGV < 5 or (#ARGV - 2) % 3 ~= 0 or #ARGV > 3002 then
  return redis.error_reply('ERR duetime bad-input triples')
end
local jobs, tokens, results = {}, {}, {}
for i = 3, #ARGV, 3 do
  local job, token, k = ARGV[i], ARGV[i + 1], i / 3
  if job == '' or token == '' then return redis.error_reply('ERR duetime bad-input token') end
  jobs[k], tokens[k], results[k] = job, token, ARGV[i + 2]
end
local corrupt = commit_guard('succeeded')
if corrupt then return corrupt end
local now = now_ms()
local datas = redis.call('HMGET', P .. 'running', unpack(tokens))
local expired = redis.call('ZCOUNT', P .. 'lease', '-inf', now) > 0  -- rare (claims reap)

-- One success, as complete.lua records it (`f`: the job's checked fields; nil: read again).
-- A one-off's only run retires it (one HSET; listed in done:succeeded with the call's others);
-- its event line goes in `lines` (`one`: its single form) unless an id holds a newline.
local now_s, retired, told = fmt(now), {}, TOLD.waiting()
local lines, one = not string.find(table.concat(jobs, ' '), '\n', 1, true) and {}, nil
local function succeed(job, token, result, r, f)
  local jk = jkey(job)
  f = f or JOB.fields(jk, 'gen', 'running', 'runs', 'queued', 'cancelled', 'paused', 'kind', 'e',
    'retries', 'lists', 'failures', 'started', 'keep')
  if f.gen and (f.running == '1' or tonumber(f.running) == 1) and (not f.queued or f.queued == '')
      and f.cancelled ~= '1' and f.paused ~= '1' and f.kind ~= 'every' and f.kind ~= 'cron'
      and (not f.e or f.e == '') and (f.retries == '0' or tonumber(f.retries) <= 0) then
    retire_success(now_s, jk, job, token, result, f)
    retired[#retired + 1], retired[#retired + 2] = now_s, job
  else
    JOB.incr(jk, 'runs', 1)
    redis.call('HSET', jk, 'last_result', result, 'last_error', '', 'last_token', token,
      'last_run', now_s)
    record_run(now, job, f, r, 'succeeded')
    settle(now, job, 'succeeded')
  end
  if told or f.keep then TOLD.ended(now, job, r.sched, 'succeeded', result, f) end
  local s, a = r.sched_text, r.attempt_text  -- the entry's digits, as stored
  local line = s .. '|' .. a .. '||' .. job
  if not lines then return event_tallied(now, 'succeeded', job, s, a, '', nil, line) end
  lines[#lines + 1], one = line, one or {job, s, a}
end

-- 1. decide each item, read only (a token twice: one item): fs, rs its fields and run, or plans
local fs, rs, plans, first, names = {}, {}, {}, {}, SUCCESS_FIELDS
local short = not expired and not told and JOB.ask(names)  -- a plain one-off's: PLAIN.acked
for i = 1, #jobs do
  local token = tokens[i]
  if not first[token] then
    first[token] = i
    local x, raw = short and PLAIN.acked(jobs[i], datas[i], short)
    local r, f, plan, code, data, bad = x, x, nil, nil, nil, x and lane_checked(x.lane)
    if not x then
      r, code, data = prefetched(now, jobs[i], token, datas[i], expired)
      f, plan, bad = commit_fields(jobs[i], token, 'succeeded', r, code, data, nil, names, raw)
    end
    if bad then return bad end
    fs[i], rs[i], plans[i] = f, r, plan
  end
end
-- 2. write (a job's second item reads its fields again: the first one changed them)
local out, taken, done, aside = {}, {}, {}, {}
for i = 1, #jobs do
  local job, plan = jobs[i], plans[i]
  if fs[i] then
    taken[#taken + 1] = tokens[i]
    succeed(job, tokens[i], results[i], rs[i], not done[job] and fs[i] or nil)
    done[job], out[i] = true, 'ok'
  elseif not plan then
    out[i] = out[first[tokens[i]]]
  elseif plan.q and aside[plan.q.id] then  -- a second invocation of a job moved aside
    drop_running(tokens[i])
    out[i] = 'quarantined'
  elseif plan.q then
    aside[plan.q.id] = true
    out[i] = commit_aside(now, 'complete_many', plan)
  else
    out[i] = commit_code(plan)
  end
end
if #taken > 0 then
  redis.call('HDEL', P .. 'running', unpack(taken))
  redis.call('ZREM', P .. 'lease', unpack(taken))
  flow_end_many(taken)  -- keyed ones free a slot, once per key
end
list_done(now, 'succeeded', retired)
if lines and #lines > 0 then  -- tallied at once (include/events.lua: flush_tally writes it)
  tally.succeeded, kinds_seen[#kinds_seen + 1] = {n = #lines, now = now, detail = '',
    lines = lines, one = one}, 'succeeded'
end
flush_tally()
return out
