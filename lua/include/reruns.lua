-- include/reruns.lua: a job's waiting re-runs (retries; reaped, released, triggered,
-- backfilled and operator-retried runs: the "r" due members, include/due.lua) as its hash
-- knows them. Field `reruns`: one line "<due ms> <due member>\n" per re-run member in its
-- lane (or waiting for a replica, include/park.lua); a paused job keeps its re-runs in its
-- `stash` instead (same lines), which resume.lua puts back. Readouts take a job's next run
-- from it (scheduler/stores/redis/reading/snapshots.py); pause, cancel, delete and a replacing add
-- take those members out of the due set with it, so nothing counts them (claim's "next").
-- A line that would take `reruns` past RERUNS_MAX (or a stash past DEF_MAX) is not
-- written: its member is due, unlisted, as before the field (claim.lua meets it).
-- Provides: RERUNS_MAX, RERUN_FIELDS, rerun_line, keep_line, flush_lines, take_reruns,
--   drop_rerun, pending_in, rerun_due
-- Key families: layout, due:<lane>

--@include core
--@include st
--@include rules

-- Room for a paused job's series line (a member of at most ~1 KiB) next to them in its stash.
local RERUNS_MAX = DEF_MAX - 4096
-- What claim.lua reads more of a job for a re-run: [1] of a series (its `retries` came with
-- the series' fields), [2] of a one-off's re-run member (drop_rerun counts it down). One
-- local: claim.lua's main chunk is near Lua's limit of 200.
local RERUN_FIELDS = {{'reruns'}, {'retries', 'reruns'}}

local function rerun_line(due, member) return fmt(due) .. ' ' .. member .. '\n' end

-- Append `line` to field `name` of job key `jk`, whose value is got[i] (an HMGET reply),
-- unless it would pass `max` bytes (false). `acc` (a call that pushes many): collected
-- there per field and written once by flush_lines.
local function keep_line(jk, name, got, i, line, max, acc)
  local parts = acc and acc[name]
  local size = parts and parts.size or #(got[i] or '')
  if size + #line > max then return false end
  if not acc then
    redis.call('HSET', jk, name, (got[i] or '') .. line)
    got[i] = (got[i] or '') .. line
    return true
  end
  if not parts then parts = {size = size, old = got[i] or ''}; acc[name] = parts end
  parts[#parts + 1], parts.size = line, size + #line
  return true
end

-- Write what keep_line collected in `acc` for job key `jk`.
local function flush_lines(jk, acc)
  for _, name in ipairs({'stash', 'reruns'}) do
    local parts = acc[name]
    if parts then redis.call('HSET', jk, name, parts.old .. table.concat(parts)) end
  end
end

-- The lines of `text` (a `reruns` value, checked) whose member still waited: each taken out
-- of due:<lane>, or by `elsewhere(member)` (true if it was there: drop_parked). Returns them.
local function take_reruns(lane, text, elsewhere)
  local taken = {}
  for score, member in string.gmatch(text or '', '(%d+) ([^\n]+)\n') do
    local n = redis.pcall('ZREM', P .. 'due:' .. lane, member)  -- another type: left alone
    if n == 1 or (elsewhere and elsewhere(member)) then
      taken[#taken + 1] = score .. ' ' .. member .. '\n'
    end
  end
  return table.concat(taken)
end

-- Re-run member `x` (its member and score) of job key `jk` (checked fields `f`, with
-- `retries` and `reruns`) leaves its due set for good (claimed, stashed or dropped): uncounted, unlisted.
local function drop_rerun(jk, f, x)
  JOB.incr(jk, 'retries', -1)
  local text, line = f.reruns or '', rerun_line(x.score, x.member)
  local i = text ~= '' and string.find('\n' .. text, '\n' .. line, 1, true)
  if not i then return end
  local rest = string.sub(text, 1, i - 1) .. string.sub(text, i + #line)
  if rest == '' then redis.call('HDEL', jk, 'reruns') else redis.call('HSET', jk, 'reruns', rest) end
end

-- Ms from `now` to the earliest pending run of a job (checked fields `f`: e, next,
-- reruns): its occurrence or a waiting re-run; -1 for none (paused: all in its stash).
local function pending_in(f, now)
  local due = (f.e and f.e ~= '') and tonumber(f.next) or nil
  for score in string.gmatch(f.reruns or '', '(%d+) [^\n]+\n') do
    if not due or tonumber(score) < due then due = tonumber(score) end
  end
  return due and math.max(0, due - now) or -1
end

-- Is a re-run of a job (checked fields `f`, with RERUN_FIELDS) listed as due at `now`? It
-- goes first: the job's due occurrence waits for a later claim (include/defer.lua, defers).
local function rerun_due(f, now)
  for score in string.gmatch(f.reruns or '', '(%d+) [^\n]+\n') do
    if tonumber(score) <= now then return true end
  end
  return false
end
