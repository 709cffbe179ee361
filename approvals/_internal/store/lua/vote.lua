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
-- ARGV[15] '1' to refresh the TTL of the shared outbox and audit streams (about once a minute
--   per caller, not on every vote: no EXPIRE storm; the webhook queue always gets its TTL)
-- ARGV[16], ARGV[17], ARGV[18] the decision JSON used instead of ARGV[5] when this vote
--   approves and a quorum of the approving votes chose approve-for-session: the narrowest
--   scope chosen, `call`, `prefix` or `tool` ('' = none: then ARGV[5], no session). A vote's
--   JSON names the scope its reviewer chose (`scope`); one without chose none.
-- Every answer but {-1} ends with the request hash as it is now (HGETALL's flat list), so the
-- caller needs no follow-up read.
-- Returns {1, status, hash} when this vote decided, {0, status, hash} when already decided,
-- {2, hash} when this voter had voted already, {3, approvals, quorum, hash} when recorded and
-- still pending, {4, hash} when the request was escalated since the voter was checked,
-- {5, hash} when the arguments were edited since the voter looked (nothing recorded by 4 or 5),
-- {-1} when there is no such request.
local row = redis.call('HGETALL', KEYS[1])
if #row == 0 then return {-1} end
local h = {}
for i = 1, #row, 2 do h[row[i]] = i + 1 end
local function field(name, default)
  local at = h[name]
  if at then return row[at] end
  return default
end
local function put(name, value)
  if h[name] then row[h[name]] = value else
    row[#row + 1] = name; row[#row + 1] = value; h[name] = #row end
end
local status = field('status')
if status ~= 'pending' then return {0, status, row} end
if ARGV[12] ~= '' and field('escalations', '0') ~= ARGV[12] then return {4, row} end
if field('proposal_version', '') ~= ARGV[13] then return {5, row} end
if h['vote:' .. ARGV[2]] then return {2, row} end
redis.call('HSET', KEYS[1], 'vote:' .. ARGV[2], ARGV[4])
put('vote:' .. ARGV[2], ARGV[4])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[11], '*', 'id', ARGV[1], 'event', 'vote',
  'status', 'pending', 'by', ARGV[2], 'via', ARGV[9], 'at', ARGV[6], 'reason', ARGV[3])
local quorum = tonumber(field('quorum', '1'))
local approvals = 0
-- Approving votes that chose a session scope, and the narrowest of their scopes.
local rank = {call = 1, prefix = 2, tool = 3}
local for_session, narrowest = 0, 4
for i = 1, #row, 2 do
  if string.sub(row[i], 1, 5) == 'vote:' then
    local cast = cjson.decode(row[i + 1])
    if cast.outcome == 'approve' then
      approvals = approvals + 1
      local r = rank[cast.scope]
      if r then
        for_session = for_session + 1
        if r < narrowest then narrowest = r end
      end
    end
  end
end
local new_status = nil
if ARGV[3] == 'deny' then new_status = 'denied' elseif approvals >= quorum then new_status = 'approved' end
if not new_status then
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[11], '*', 'op', 'update', 'id', ARGV[1],
    'channel', field('channel', ''))
  if ARGV[15] == '1' then
    redis.call('EXPIRE', KEYS[4], ARGV[7])
    redis.call('EXPIRE', KEYS[5], ARGV[7])
  end
  return {3, approvals, quorum, row}
end
local decision = ARGV[5]
if new_status == 'approved' and for_session >= quorum and narrowest < 4 then
  local chosen = ARGV[15 + narrowest]
  if chosen ~= '' then decision = chosen end
end
redis.call('HSET', KEYS[1], 'status', new_status, 'decision', decision)
redis.call('EXPIRE', KEYS[1], ARGV[7])
put('status', new_status)
put('decision', decision)
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[11], '*', 'op', 'update', 'id', ARGV[1],
  'channel', field('channel', ''))
if ARGV[14] ~= '' and new_status == 'approved' then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[11], '*', 'id', ARGV[1], 'event', new_status,
    'status', new_status, 'by', ARGV[2], 'via', ARGV[9], 'at', ARGV[6], 'reason', ARGV[10],
    'edited_arguments', ARGV[14])
else
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[11], '*', 'id', ARGV[1], 'event', new_status,
    'status', new_status, 'by', ARGV[2], 'via', ARGV[9], 'at', ARGV[6], 'reason', ARGV[10])
end
if ARGV[15] == '1' then
  redis.call('EXPIRE', KEYS[4], ARGV[7])
  redis.call('EXPIRE', KEYS[5], ARGV[7])
end
if h['callback'] then
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[11], '*', 'op', 'decided', 'id', ARGV[1])
  redis.call('EXPIRE', KEYS[6], ARGV[7])
end
redis.call('PUBLISH', ARGV[8], ARGV[1])
return {1, new_status, row}
