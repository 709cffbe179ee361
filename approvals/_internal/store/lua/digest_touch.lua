-- digest_touch: a request listed in a digest changed (decided, voted on, edited, escalated):
-- the digest's message is behind; mark it to be drawn (at once, unless a draw is already
-- scheduled: coalescing keeps the earlier time).
-- KEYS[1] digest hash   KEYS[2] dirty digests zset
-- ARGV[1] digest id   ARGV[2] now (epoch s)   ARGV[3] TTL (s)
-- Returns 1, or 0 when the digest is gone.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'version', 1)
if redis.call('HGET', KEYS[1], 'parked') then
  -- scheduled only for its later look for late copies (digest_drawn.lua): a change is due now
  redis.call('HDEL', KEYS[1], 'parked')
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[1])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
