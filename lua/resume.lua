#!lua
-- resume.lua: make a paused job claimable again: what its stash holds is due again (its
-- re-runs listed in `reruns` again, include/reruns.lua); occurrences missed meanwhile
-- follow the job's misfire policy when claim.lua meets them. Releases a held (queued) occurrence if
-- nothing of the job runs.
-- Decide, then write: the job's key type and fields are checked first; a job whose data
-- does not parse is moved aside (the quarantine, include/aside.lua), and a corrupt
-- namespace key stops the call before any write.
--
-- KEYS[1]: any key of the namespace (routes the call in Redis Cluster; scripts build their keys from ARGV[1])
-- Key families: job:<job_id>, due:<lane>, seq, wake, events, stats, skips:<job_id>,
--   dead:<job_id>, bf:<job_id>, quarantined, quarantined:<entry>, layout, done:<state>,
--   paused, runs:<job_id>, levels:<lane>, turns:<level>
-- ARGV[1] prefix, ARGV[2] now override ("" = TIME)
-- ARGV[3] job id
-- Returns: 1 if the job was paused, else 0 (also when the job was moved aside: it did not
--          parse); or an error reply "ERR duetime corrupt ..."

--@include core
--@include job
--@include events
--@include due
--@include settle
--@include check
--@include aside
--@include reruns
--@include flow

local job = ARGV[3]
if job == '' then return redis.error_reply('ERR duetime bad-input id') end
local corrupt = aside_ok() or seq_ok() or events_ok('resumed', 'quarantined')
if corrupt then return corrupt end
local jk, now = jkey(job), now_ms()
local f, why, t = read_job(job, {'gen', 'paused', 'stash', 'lane', 'running', 'queued',
  'cancelled', 'kind', 'e', 'retries', 'state', 'reruns'})
if why then
  move_aside(now, 'resume', {id = job, job = job, reason = why, type = t})
  return 0
end
if not f or f.paused ~= '1' or (f.state and f.state ~= '') then return 0 end  -- ended
corrupt = lane_ok(f.lane)
if corrupt then return corrupt end
JOB.del(jk, 'paused', 'stash')
JOB.set(jk, 'ready', fmt(now))  -- its due members are claimable from now (lag)
redis.pcall('SREM', P .. 'paused', job)  -- the listing index (derived: pcall)
local got, acc = {nil, nil, nil, f.reruns}, {}  -- its re-runs' lines, written once
for score, member in string.gmatch(f.stash or '', '(%d+) ([^\n]+)\n') do
  member = string.gsub(member, '^(%x+|r|%d+|%d+)@%d+|', '%1|')  -- ready from now (a release's: dropped)
  due_add(f.lane, tonumber(score), member)
  local seq = string.match(member, '^(%x+)|s|')
  if seq then JOB.set(jk, 'e', seq) end
  if not seq then keep_line(jk, 'reruns', got, 4, rerun_line(tonumber(score), member), RERUNS_MAX, acc) end
  wake_if_head(f.lane, member, tonumber(score))
end
flush_lines(jk, acc)
event(now, 'resumed', job, nil, nil, '')
if tonumber(f.running) <= 0 and f.queued and f.queued ~= '' then
  JOB.incr(jk, 'running', 1)  -- settle() releases the queued occurrence
  settle(now, job, 'released')
end
return 1
