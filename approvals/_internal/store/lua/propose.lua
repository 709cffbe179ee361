-- propose: a reviewer's edit of a pending request's arguments; the votes restart on it.
-- KEYS[1] request hash   KEYS[2] pending zset   KEYS[3] deadlines zset
-- KEYS[4] outbox stream  KEYS[5] audit stream
-- KEYS[6] webhook queue stream (an entry when the request has a callback: `callback` is set)
-- ARGV[1] request id   ARGV[2] editor   ARGV[3] proposal JSON   ARGV[4] its version
-- ARGV[5] the editor's approve vote JSON   ARGV[6] decision JSON used if the edit decides
-- ARGV[7] now (epoch s)   ARGV[8] retention TTL (s)   ARGV[9] pub/sub channel   ARGV[10] via
-- ARGV[11] outbox max length   ARGV[12] expected escalations ('' = any)
-- ARGV[13] the version the editor looked at ('' = the agent's own arguments)
-- ARGV[14] edited arguments JSON (the audit entries carry them)
-- Every earlier vote is dropped (they were for another version); the editor's edit counts
-- as their approval of it.
-- Returns {1, status} when the edit decided (quorum 1), {0, status, decision JSON} when
-- already decided, {3, approvals, quorum} when recorded and still pending, {4} when
-- escalated since the editor was checked, {5} when edited since the editor looked,
-- {-1} when there is no such request.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {-1} end
if status ~= 'pending' then
  return {0, status, redis.call('HGET', KEYS[1], 'decision') or ''}
end
if ARGV[12] ~= '' and (redis.call('HGET', KEYS[1], 'escalations') or '0') ~= ARGV[12] then
  return {4}
end
if (redis.call('HGET', KEYS[1], 'proposal_version') or '') ~= ARGV[13] then return {5} end
local fields = redis.call('HKEYS', KEYS[1])
for _, name in ipairs(fields) do
  if string.sub(name, 1, 5) == 'vote:' then redis.call('HDEL', KEYS[1], name) end
end
redis.call('HSET', KEYS[1], 'proposal', ARGV[3], 'proposal_version', ARGV[4],
  'vote:' .. ARGV[2], ARGV[5])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[11], '*', 'id', ARGV[1], 'event', 'edit',
  'status', 'pending', 'by', ARGV[2], 'via', ARGV[10], 'at', ARGV[7],
  'reason', 'arguments edited; votes restart', 'edited_arguments', ARGV[14])
local quorum = tonumber(redis.call('HGET', KEYS[1], 'quorum') or '1')
if quorum > 1 then
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[11], '*', 'op', 'update', 'id', ARGV[1],
    'channel', redis.call('HGET', KEYS[1], 'channel') or '')
  return {3, 1, quorum}
end
redis.call('HSET', KEYS[1], 'status', 'approved', 'decision', ARGV[6])
redis.call('EXPIRE', KEYS[1], ARGV[8])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[11], '*', 'op', 'update', 'id', ARGV[1],
  'channel', redis.call('HGET', KEYS[1], 'channel') or '')
redis.call('EXPIRE', KEYS[4], ARGV[8])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[11], '*', 'id', ARGV[1], 'event', 'approved',
  'status', 'approved', 'by', ARGV[2], 'via', ARGV[10], 'at', ARGV[7], 'reason', '',
  'edited_arguments', ARGV[14])
redis.call('EXPIRE', KEYS[5], ARGV[8])
if redis.call('HEXISTS', KEYS[1], 'callback') == 1 then
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[11], '*', 'op', 'decided', 'id', ARGV[1])
  redis.call('EXPIRE', KEYS[6], ARGV[8])
end
redis.call('PUBLISH', ARGV[9], ARGV[1])
return {1, 'approved'}
