-- digest_drawn: after drawing a digest's message (or failing to), record what was drawn,
-- free the draw lock, and schedule the next draw if it changed meanwhile (no sooner than
-- `interval`: at most one chat.update per digest per interval) or after a failure. A failed
-- draw keeps the lock: its post may have landed unseen, and only this holder (or one that
-- finds it gone) may look for it and post again, as with begin_post.lua.
-- KEYS[1] digest hash   KEYS[2] draw lock   KEYS[3] dirty digests zset
-- ARGV[1] digest id   ARGV[2] version drawn ('' when the draw failed)   ARGV[3] message ts
-- ('' when not posted now)   ARGV[4] now (epoch s)   ARGV[5] seconds until the next draw may
-- happen   ARGV[6] holder   ARGV[7] TTL (s)
-- Returns {version now, drawn now}.
if ARGV[2] ~= '' and redis.call('GET', KEYS[2]) == ARGV[6] then redis.call('DEL', KEYS[2]) end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZREM', KEYS[3], ARGV[1])
  return {0, 0}
end
local now = tonumber(ARGV[4])
if ARGV[3] ~= '' and not redis.call('HGET', KEYS[1], 'ts') then
  redis.call('HSET', KEYS[1], 'ts', ARGV[3], 'posted_at', ARGV[4])
end
local d = redis.call('HMGET', KEYS[1], 'version', 'drawn')
local version, drawn = tonumber(d[1] or '0'), tonumber(d[2] or '0')
if ARGV[2] == '' then
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[5]), ARGV[1])
else
  if tonumber(ARGV[2]) > drawn then
    drawn = tonumber(ARGV[2])
    redis.call('HSET', KEYS[1], 'drawn', drawn)
  end
  if version > drawn then
    redis.call('ZADD', KEYS[3], now + tonumber(ARGV[5]), ARGV[1])
  else
    redis.call('ZREM', KEYS[3], ARGV[1])
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[7])
redis.call('EXPIRE', KEYS[3], ARGV[7])
return {version, drawn}
