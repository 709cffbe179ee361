-- digest_drawn: after drawing a digest's message (or failing to), record what was drawn,
-- free the draw lock, and schedule the next draw if it changed meanwhile (no sooner than
-- `interval`: at most one chat.update per digest per interval) or after a failure. A failed
-- draw keeps the lock: its post may have landed unseen, and only this holder (or one that
-- finds it gone) may look for it and post again, as with begin_post.lua. Second copies of
-- the message still to retire keep it scheduled (retried after `ARGV[5]`), and so does a
-- look for copies that may still land (`recheck`, at its time; the hash's `parked` says
-- the digest is scheduled for that look only, so a change moves its draw to now).
-- KEYS[1] digest hash   KEYS[2] draw lock   KEYS[3] dirty digests zset
-- ARGV[1] digest id   ARGV[2] version drawn ('' when the draw failed)   ARGV[3] message ts
-- ('' when not posted now)   ARGV[4] now (epoch s)   ARGV[5] seconds until the next draw may
-- happen   ARGV[6] holder   ARGV[7] TTL (s)   ARGV[8] second copies to retire (JSON list;
-- '' leaves them as they are)   ARGV[9] recheck (JSON {at, since}; '' leaves it, '-' clears)
-- ARGV[10] reviewers to DM about the message (JSON list; '' for none): recorded as owed
-- (`dm:<user>`) with the message when this call records it, and sent by the next draw, under
-- the draw lock (`Digests.dm_sent` deletes each once sent), scheduled `ARGV[5]` later
-- Returns {version now, drawn now}.
if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) == ARGV[6] then redis.call('DEL', KEYS[2]) end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZREM', KEYS[3], ARGV[1])
  return {0, 0}
end
local now = tonumber(ARGV[4])
local dms = false
if ARGV[3] ~= '' and not redis.call('HGET', KEYS[1], 'ts') then
  redis.call('HSET', KEYS[1], 'ts', ARGV[3], 'posted_at', ARGV[4])
  if ARGV[10] ~= '' then
    for _, user in ipairs(cjson.decode(ARGV[10])) do
      redis.call('HSET', KEYS[1], 'dm:' .. user, 1)
      dms = true
    end
  end
end
if ARGV[8] == '[]' then
  redis.call('HDEL', KEYS[1], 'strays')
elseif ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'strays', ARGV[8])
end
if ARGV[9] == '-' then
  redis.call('HDEL', KEYS[1], 'recheck')
elseif ARGV[9] ~= '' then
  redis.call('HSET', KEYS[1], 'recheck', ARGV[9])
end
local d = redis.call('HMGET', KEYS[1], 'version', 'drawn', 'strays', 'recheck')
local version, drawn = tonumber(d[1] or '0'), tonumber(d[2] or '0')
local at = nil
redis.call('HDEL', KEYS[1], 'parked')
if ARGV[2] == '' then
  at = now + tonumber(ARGV[5])
else
  if tonumber(ARGV[2]) > drawn then
    drawn = tonumber(ARGV[2])
    redis.call('HSET', KEYS[1], 'drawn', drawn)
  end
  if version > drawn or d[3] or dms then at = now + tonumber(ARGV[5]) end
  if d[4] then
    local recheck = math.max(tonumber(cjson.decode(d[4]).at), now + tonumber(ARGV[5]))
    if not at or recheck < at then
      -- scheduled for the look only: a change (digest_touch.lua, digest_add.lua) comes first
      at = recheck
      redis.call('HSET', KEYS[1], 'parked', 1)
    end
  end
end
if at then
  redis.call('ZADD', KEYS[3], at, ARGV[1])
else
  redis.call('ZREM', KEYS[3], ARGV[1])
end
redis.call('EXPIRE', KEYS[1], ARGV[7])
redis.call('EXPIRE', KEYS[3], ARGV[7])
return {version, drawn}
