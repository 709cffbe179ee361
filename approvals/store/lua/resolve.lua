-- resolve: the one compare-and-set out of `pending`; exactly one caller wins.
-- KEYS[1] request hash   KEYS[2] pending zset   KEYS[3] deadlines zset
-- KEYS[4] outbox stream  KEYS[5] audit stream
-- KEYS[6] webhook queue stream (an entry when the request has a callback: `callback` is set)
-- ARGV[1] request id     ARGV[2] new status   ARGV[3] decision JSON   ARGV[4] now (epoch s)
-- ARGV[5] retention TTL (s)   ARGV[6] pub/sub channel   ARGV[7] decided by   ARGV[8] via
-- ARGV[9] reason (may be empty)   ARGV[10] outbox max length
-- ARGV[11] expected deadline ('' = any): for timeouts, only resolve if the deadline is unchanged
-- Returns {1, status} when this call decided, {0, status, decision JSON} when it lost,
-- {-1} when there is no such request.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {-1} end
if status ~= 'pending' then
  return {0, status, redis.call('HGET', KEYS[1], 'decision') or ''}
end
if ARGV[11] ~= '' and redis.call('HGET', KEYS[1], 'deadline') ~= ARGV[11] then
  return {0, status, ''}
end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'decision', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[10], '*', 'op', 'update', 'id', ARGV[1],
  'channel', redis.call('HGET', KEYS[1], 'channel') or '')
redis.call('EXPIRE', KEYS[4], ARGV[5])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[10], '*', 'id', ARGV[1], 'event', ARGV[2],
  'status', ARGV[2], 'by', ARGV[7], 'via', ARGV[8], 'at', ARGV[4], 'reason', ARGV[9])
redis.call('EXPIRE', KEYS[5], ARGV[5])
if redis.call('HEXISTS', KEYS[1], 'callback') == 1 then
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[10], '*', 'op', 'decided', 'id', ARGV[1])
  redis.call('EXPIRE', KEYS[6], ARGV[5])
end
redis.call('PUBLISH', ARGV[6], ARGV[1])
return {1, ARGV[2]}
