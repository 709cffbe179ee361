-- escalate: move a pending request whose deadline passed to another route, with a new deadline.
-- KEYS[1] request hash   KEYS[2] deadlines zset   KEYS[3] outbox stream   KEYS[4] audit stream
-- KEYS[5] pending zset
-- ARGV[1] request id   ARGV[2] expected deadline (the one that passed)   ARGV[3] new route
-- ARGV[4] new channel  ARGV[5] new deadline (epoch s)   ARGV[6] new quorum
-- ARGV[7] new reviewers JSON   ARGV[8] now (epoch s)   ARGV[9] request TTL (s)
-- ARGV[10] outbox max length
-- Returns {1, escalations} when moved, {0, status} when it was decided or moved by someone else.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {-1} end
if status ~= 'pending' or redis.call('HGET', KEYS[1], 'deadline') ~= ARGV[2] then
  return {0, status}
end
local from_route = redis.call('HGET', KEYS[1], 'route') or ''
local from_channel = redis.call('HGET', KEYS[1], 'channel') or ''
local from_message = redis.call('HGET', KEYS[1], 'message') or ''
local n = redis.call('HINCRBY', KEYS[1], 'escalations', 1)
redis.call('HSET', KEYS[1], 'route', ARGV[3], 'channel', ARGV[4], 'deadline', ARGV[5],
  'quorum', ARGV[6], 'reviewers', ARGV[7])
redis.call('HDEL', KEYS[1], 'message')
local fields = redis.call('HKEYS', KEYS[1])
for _, f in ipairs(fields) do
  if string.sub(f, 1, 5) == 'vote:' then redis.call('HDEL', KEYS[1], f) end
end
redis.call('EXPIRE', KEYS[1], ARGV[9])
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[10], '*', 'op', 'escalated', 'id', ARGV[1],
  'message', from_message, 'to', ARGV[4], 'channel', from_channel)
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[10], '*', 'op', 'post', 'id', ARGV[1],
  'channel', ARGV[4])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[10], '*', 'id', ARGV[1], 'event', 'escalated',
  'status', 'pending', 'by', 'system', 'via', 'timeout', 'at', ARGV[8],
  'reason', from_route .. ' -> ' .. ARGV[3])
-- The indexes and streams must outlive the new deadline (a chain of escalations can keep a
-- request pending past the window the last create gave them); never shorten a TTL.
for i = 2, 5 do
  local ttl = redis.call('TTL', KEYS[i])
  if ttl ~= -2 and ttl < tonumber(ARGV[9]) then redis.call('EXPIRE', KEYS[i], ARGV[9]) end
end
return {1, n}
