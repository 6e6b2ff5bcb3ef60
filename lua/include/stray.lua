-- include/stray.lua: the RUNNING entries that no reaper would ever meet (duetime
-- doctor's full scan, reconcile.lua).
-- Provides: stray_entries
-- Key families: layout, job:<job_id>, running, lease, quarantined, quarantined:<entry>,
--   events, stats, due:<lane>, flow:held, flow:run, flow:wait:<key>, flow:win:<key>,
--   levels:<lane>, limits, turns:<level>, wake

--@include core
--@include aside
--@include tokens

-- RUNNING entries that do not parse and hold no lease (no reaper would ever meet them):
-- each reported as a finding named by its quarantine entry id, and moved aside unless `dry`.
-- One with a lease is left to the claim's reaper, which moves it aside when it expires.
-- Every entry is parsed (one HGETALL): ~3x running_jobs' cost (reconcile.lua: doctor only).
local function stray_entries(now, dry)
  local found, all = {}, redis.call('HGETALL', P .. 'running')
  for i = 1, #all, 2 do
    local token, data = all[i], all[i + 1]
    if parse_running(data) == false and not redis.call('ZSCORE', P .. 'lease', token) then
      local id, what = token_entry(token), 'malformed RUNNING entry without a lease'
      if not dry then
        redis.call('HDEL', P .. 'running', token)
        flow_end_many({token})
        move_aside(now, 'reconcile', {id = id, job = '', reason = what, member = '', lane = '',
          type = '', running = data, token = token})
      end
      found[#found + 1] = {id, what .. ' (token ' .. printable(token) .. ')',
        dry and 'none (dry run)' or 'moved aside'}
    end
  end
  return found
end
