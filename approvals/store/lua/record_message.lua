-- record_message: note a Slack message of a request (posted or found in history) and free
-- the post lock. The first copy of the current route round is the message; any other copy
-- (a duplicate, or a post that landed after an escalation) is kept in 'copies' so the
-- outcome is drawn on it too.
-- KEYS[1] request hash   KEYS[2] post lock
-- ARGV[1] message JSON ({"channel","ts"})   ARGV[2] escalations it was posted for
-- Returns {0} when the request is gone | {1, status} as the message | {2, status} as a copy
redis.call('DEL', KEYS[2])
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {0} end
local current = redis.call('HGET', KEYS[1], 'message')
if current == ARGV[1] then return {1, status} end
local round = redis.call('HGET', KEYS[1], 'escalations') or '0'
if not current and round == ARGV[2] then
  redis.call('HSET', KEYS[1], 'message', ARGV[1])
  return {1, status}
end
local raw = redis.call('HGET', KEYS[1], 'copies')
local copies = raw and cjson.decode(raw) or {}
for _, copy in ipairs(copies) do
  if copy == ARGV[1] then return {2, status} end
end
table.insert(copies, ARGV[1])
redis.call('HSET', KEYS[1], 'copies', cjson.encode(copies))
return {2, status}
