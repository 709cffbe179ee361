-- resolve: the one compare-and-set out of `pending`; exactly one caller wins.
-- KEYS[1] request hash   KEYS[2] pending zset   KEYS[3] deadlines zset
-- KEYS[4] outbox stream  KEYS[5] audit stream
-- KEYS[6] webhook queue stream (an entry when the request has a callback: `callback` is set)
-- ARGV[1] request id     ARGV[2] new status   ARGV[3] decision JSON   ARGV[4] now (epoch s)
-- ARGV[5] retention TTL (s)   ARGV[6] pub/sub channel   ARGV[7] decided by   ARGV[8] via
-- ARGV[9] reason (may be empty)   ARGV[10] outbox max length
-- ARGV[11] expected deadline ('' = any): for timeouts, only resolve if the deadline is unchanged
-- ARGV[12] '1' to refresh the TTL of the shared outbox and audit streams (the caller does it
--   about once a minute, not on every decision: no EXPIRE storm; the webhook queue, written
--   only for requests with a callback, always gets its TTL)
-- ARGV[13] '1' to resolve only a request whose principal (in its `data`) is ARGV[14]: another
--   principal's is answered {-1}, as an unknown id (the HTTP API's rule: a token sees and
--   cancels only its own requests), and nothing changes
-- ARGV[15] '1' to resolve only a request whose arguments are still those of version ARGV[16]
--   ('' = the agent's own; else a reviewer's edit, `proposal_version`): the version the
--   decider was shown
-- ARGV[17] expected escalations ('' = any): the decider was checked against that route round
--   (a reviewer's question, `approvals/_internal/questions.py`); a request escalated since is
--   answered {4, status, hash} and nothing changes
-- KEYS[7] the caller's question link (`Keys.question`; the request key when none)
-- ARGV[18] the link's value ('' = none: nothing is linked)   ARGV[19] its TTL (s): with a
--   question, the caller's retry takes it (`create.lua`)
-- Every answer but {-1} ends with the request hash as it is now (HGETALL's flat list), so the
-- caller needs no follow-up read.
-- Returns {1, status, hash} when this call decided, {0, status, hash} when it lost,
-- {5, status, hash} when the arguments were edited since the decider looked, {4, status, hash}
-- when the request moved to another route round (nothing changed by 4 or 5), {-1} when there
-- is no such request.
local row = redis.call('HGETALL', KEYS[1])
if #row == 0 then return {-1} end
local h = {}
for i = 1, #row, 2 do h[row[i]] = i + 1 end
if ARGV[13] == '1' then
  local owner = h['data'] and cjson.decode(row[h['data']])['principal']
  if owner ~= ARGV[14] then return {-1} end
end
local status = row[h['status']]
if status ~= 'pending' then return {0, status, row} end
if ARGV[11] ~= '' and (h['deadline'] and row[h['deadline']]) ~= ARGV[11] then
  return {0, status, row}
end
if ARGV[15] == '1' and (h['proposal_version'] and row[h['proposal_version']] or '') ~= ARGV[16] then
  return {5, status, row}
end
if ARGV[17] and ARGV[17] ~= '' and (h['escalations'] and row[h['escalations']] or '0') ~= ARGV[17] then
  return {4, status, row}
end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'decision', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[5])
row[h['status']] = ARGV[2]
if h['decision'] then row[h['decision']] = ARGV[3] else
  row[#row + 1] = 'decision'; row[#row + 1] = ARGV[3] end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[10], '*', 'op', 'update', 'id', ARGV[1],
  'channel', h['channel'] and row[h['channel']] or '')
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[10], '*', 'id', ARGV[1], 'event', ARGV[2],
  'status', ARGV[2], 'by', ARGV[7], 'via', ARGV[8], 'at', ARGV[4], 'reason', ARGV[9])
if ARGV[12] == '1' then
  redis.call('EXPIRE', KEYS[4], ARGV[5])
  redis.call('EXPIRE', KEYS[5], ARGV[5])
end
if h['callback'] then
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[10], '*', 'op', 'decided', 'id', ARGV[1])
  redis.call('EXPIRE', KEYS[6], ARGV[5])
end
if ARGV[18] and ARGV[18] ~= '' then
  redis.call('SET', KEYS[7], ARGV[18], 'EX', ARGV[19])
end
redis.call('PUBLISH', ARGV[6], ARGV[1])
return {1, ARGV[2], row}
