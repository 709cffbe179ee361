-- vote: record one reviewer's vote towards a quorum; decide when it is reached or on any deny.
-- KEYS[1] request hash   KEYS[2] pending zset   KEYS[3] deadlines zset
-- KEYS[4] outbox stream  KEYS[5] audit stream
-- KEYS[6] webhook queue stream (an entry when the request has a callback: `callback` is set)
-- ARGV[1] request id   ARGV[2] voter   ARGV[3] vote outcome (approve/deny)   ARGV[4] vote JSON
-- ARGV[5] decision JSON used if this vote decides   ARGV[6] now (epoch s)
-- ARGV[7] retention TTL (s)   ARGV[8] pub/sub channel   ARGV[9] via   ARGV[10] reason
-- ARGV[11] outbox max length
-- ARGV[12] expected escalations ('' = any): the voter was checked against that route
-- ARGV[13] the version voted for ('' = the agent's own arguments; else a proposal's version)
-- ARGV[14] edited arguments JSON for the audit entry ('' = none)
-- Returns {1, status} when this vote decided, {0, status, decision JSON} when already decided,
-- {2} when this voter had voted already, {3, approvals, quorum} when recorded and still pending,
-- {4} when the request was escalated since the voter was checked (nothing recorded),
-- {5} when the arguments were edited since the voter looked (nothing recorded),
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
if redis.call('HSETNX', KEYS[1], 'vote:' .. ARGV[2], ARGV[4]) == 0 then return {2} end
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[11], '*', 'id', ARGV[1], 'event', 'vote',
  'status', 'pending', 'by', ARGV[2], 'via', ARGV[9], 'at', ARGV[6], 'reason', ARGV[3])
local quorum = tonumber(redis.call('HGET', KEYS[1], 'quorum') or '1')
local approvals = 0
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 5) == 'vote:' and cjson.decode(fields[i + 1]).outcome == 'approve' then
    approvals = approvals + 1
  end
end
local new_status = nil
if ARGV[3] == 'deny' then new_status = 'denied' elseif approvals >= quorum then new_status = 'approved' end
if not new_status then
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[11], '*', 'op', 'update', 'id', ARGV[1],
    'channel', redis.call('HGET', KEYS[1], 'channel') or '')
  return {3, approvals, quorum}
end
redis.call('HSET', KEYS[1], 'status', new_status, 'decision', ARGV[5])
redis.call('EXPIRE', KEYS[1], ARGV[7])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[11], '*', 'op', 'update', 'id', ARGV[1],
  'channel', redis.call('HGET', KEYS[1], 'channel') or '')
redis.call('EXPIRE', KEYS[4], ARGV[7])
if ARGV[14] ~= '' and new_status == 'approved' then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[11], '*', 'id', ARGV[1], 'event', new_status,
    'status', new_status, 'by', ARGV[2], 'via', ARGV[9], 'at', ARGV[6], 'reason', ARGV[10],
    'edited_arguments', ARGV[14])
else
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[11], '*', 'id', ARGV[1], 'event', new_status,
    'status', new_status, 'by', ARGV[2], 'via', ARGV[9], 'at', ARGV[6], 'reason', ARGV[10])
end
redis.call('EXPIRE', KEYS[5], ARGV[7])
if redis.call('HEXISTS', KEYS[1], 'callback') == 1 then
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[11], '*', 'op', 'decided', 'id', ARGV[1])
  redis.call('EXPIRE', KEYS[6], ARGV[7])
end
redis.call('PUBLISH', ARGV[8], ARGV[1])
return {1, new_status}
