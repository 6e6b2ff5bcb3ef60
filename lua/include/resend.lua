-- include/resend.lua: the resend record of claim.lua: each owner's last request id and
-- reply, kept for 60 s, so a re-sent request (redis-py retries a timed-out EVALSHA) gets
-- the same reply and nothing is claimed twice.
-- Provides: resent_reply, remember_reply
-- Key families: layout, claimed:<owner>

--@include core

-- The reply already given to request `req` of `owner`, or nil. A record of another type
-- is no record (remember_reply overwrites it: it is this replica's own bookkeeping).
local function resent_reply(owner, req)
  local last = redis.pcall('GET', P .. 'claimed:' .. owner)
  if type(last) == 'string' and string.sub(last, 1, #req + 1) == req .. '\n' then
    return string.sub(last, #req + 2)
  end
  return nil
end

local function remember_reply(owner, req, reply)
  redis.call('SET', P .. 'claimed:' .. owner, req .. '\n' .. reply, 'PX', 60000)
end
