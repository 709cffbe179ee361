-- create: write a new request, unless its call_id already made one. A request decided at
-- creation (a policy allow/deny, a session grant) is written terminal: never queued for Slack.
-- KEYS[1] request hash    KEYS[2] call-id key (or the request key when there is no call_id)
-- KEYS[3] pending zset    KEYS[4] deadlines zset   KEYS[5] outbox stream   KEYS[6] audit stream
-- ARGV[1] request id      ARGV[2] request JSON     ARGV[3] created (epoch s)
-- ARGV[4] deadline (epoch s)   ARGV[5] request TTL (s)   ARGV[6] index/stream TTL (s)
-- ARGV[7] has call_id (1/0)    ARGV[8] route   ARGV[9] channel   ARGV[10] actor
-- ARGV[11] outbox max length   ARGV[12] quorum   ARGV[13] reviewers JSON
-- ARGV[14] terminal status ('' = pending)   ARGV[15] decision JSON   ARGV[16] decided by
-- ARGV[17] via   ARGV[18] reason
-- ARGV[19] the id of an expired request whose call-id marker may be replaced ('' = none)
-- KEYS[7] webhook queue stream   ARGV[20] '1' when the request has a decision callback
-- ARGV[21] the request's fingerprint (what a decision on it applies to)
-- ARGV[22] '1' to refresh the TTL of the shared streams (audit, outbox): the caller asks about
--   once a minute, not on every create (no EXPIRE storm). Streams stay when emptied; the
--   pending and deadline indexes vanish when their last member goes, so they get it always.
-- The call-id key holds '<request id> <fingerprint>', or '- withdrawn' when the caller
-- withdrew the call before any request of it had landed (`cancel_call`).
-- Returns {1, id} when created, {0, existing id} when the call_id was seen before with the
-- same fingerprint, {2, existing id} when it was seen with a different one (a conflict:
-- nothing is written), {3, ''} when the call was withdrawn: nothing is written, and the
-- caller creates it again already cancelled (ARGV[19] = '-' replaces the withdrawal mark).
-- KEYS[8] the session grant that decides it (or the request key)   ARGV[23] '1' when a grant
--   decides it: {4, ''} when that grant is gone (revoked, expired) since it was looked up:
--   nothing is written, and the caller asks instead.
-- KEYS[9] the caller's question link (`Keys.question`; the request key when none)
-- ARGV[24] '1' to take it: the new request (the caller's next one for this tool in this
--   session) takes a reviewer's question left for this caller, session and tool
--   (`resolve.lua`), as its `answers` field, and the link is gone: {1, id, question JSON}
--   ('' when there was none). One decided at creation (a policy rule, a grant) takes it too:
--   it answers nobody, and no later call is shown as the answer.
if ARGV[7] == '1' then
  local existing = redis.call('GET', KEYS[2])
  if existing then
    local eid, efp = string.match(existing, '^(%S+) ?(%S*)$')
    if eid == '-' and ARGV[19] ~= '-' then return {3, ''} end
    if eid ~= ARGV[19] then
      if efp == ARGV[21] then return {0, eid} end
      return {2, eid}
    end
  end
end
if ARGV[23] == '1' and redis.call('EXISTS', KEYS[8]) == 0 then return {4, ''} end
local decided = ARGV[14] ~= ''
redis.call('HSET', KEYS[1], 'status', 'pending', 'data', ARGV[2], 'route', ARGV[8],
  'channel', ARGV[9], 'deadline', ARGV[4], 'escalations', '0', 'quorum', ARGV[12],
  'reviewers', ARGV[13])
if ARGV[20] == '1' then redis.call('HSET', KEYS[1], 'callback', '1') end
redis.call('EXPIRE', KEYS[1], ARGV[5])
if ARGV[7] == '1' then
  redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. ARGV[21], 'EX', ARGV[5])
end
redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[11], '*', 'id', ARGV[1], 'event', 'created',
  'status', 'pending', 'by', ARGV[10], 'via', 'create', 'at', ARGV[3], 'route', ARGV[8])
if ARGV[22] == '1' then redis.call('EXPIRE', KEYS[6], ARGV[6]) end
local answers = ''
if ARGV[24] == '1' then
  answers = redis.call('GET', KEYS[9]) or ''
  if answers ~= '' then
    redis.call('DEL', KEYS[9])
    redis.call('HSET', KEYS[1], 'answers', answers)
  end
end
if decided then
  redis.call('HSET', KEYS[1], 'status', ARGV[14], 'decision', ARGV[15])
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[11], '*', 'id', ARGV[1], 'event', ARGV[14],
    'status', ARGV[14], 'by', ARGV[16], 'via', ARGV[17], 'at', ARGV[3], 'reason', ARGV[18],
    'route', ARGV[8])
  if ARGV[20] == '1' then
    redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[11], '*', 'op', 'decided', 'id', ARGV[1])
    redis.call('EXPIRE', KEYS[7], ARGV[6])
  end
  return {1, ARGV[1], answers}
end
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
redis.call('EXPIRE', KEYS[3], ARGV[6])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[1])
redis.call('EXPIRE', KEYS[4], ARGV[6])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[11], '*', 'op', 'post', 'id', ARGV[1],
  'channel', ARGV[9])
if ARGV[22] == '1' then redis.call('EXPIRE', KEYS[5], ARGV[6]) end
return {1, ARGV[1], answers}
