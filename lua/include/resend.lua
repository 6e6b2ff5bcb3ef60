-- include/resend.lua: the resend record of claim.lua: each owner's last reply, which
-- starts with its request id, kept for 60 s, so a re-sent request (redis-py retries a
-- timed-out EVALSHA) gets the same reply and nothing is claimed twice. The record is the
-- reply itself (no second copy). One an earlier version wrote ("<request id>\n<JSON>") is
-- returned whole the same way; the replica's parser reads both (claiming/claim_reply.py, claim_reply).
-- Provides: resent_reply, remember_reply
-- Key families: layout, claimed:<owner>

--@include core

-- The reply already given to request `req` of `owner`, or nil. A record of another type
-- is no record (remember_reply overwrites it: it is this replica's own bookkeeping).
local function resent_reply(owner, req)
  local last = redis.pcall('GET', P .. 'claimed:' .. owner)
  if type(last) == 'string' and string.sub(last, 1, #req + 1) == req .. '\n' then
    return last
  end
  return nil
end

-- Keep `reply` (it starts with its request id) as `owner`'s resend record; returns it.
local function remember_reply(owner, reply)
  redis.call('SET', P .. 'claimed:' .. owner, reply, 'PX', 60000)
  return reply
end
