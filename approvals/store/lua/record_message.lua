-- record_message: note a Slack message of a request (posted or found in history) and free
-- the post lock. The first copy of the current route round is the message; any other copy
-- (a duplicate, or a post that landed after an escalation) is kept in 'copies' so the
-- outcome is drawn on it too.
-- KEYS[1] request hash   KEYS[2] post lock
-- ARGV[1] message JSON ({"channel","ts"})   ARGV[2] escalations it was posted for
-- Returns {0} when the request is gone | {1, status} as the message | {2, status} as a copy
redis.call('DEL', KEYS[2])
local f = redis.call('HMGET', KEYS[1], 'status', 'message', 'escalations', 'copies')
local status, current, round, raw = f[1], f[2], f[3] or '0', f[4]
if not status then return {0} end
if current == ARGV[1] then return {1, status} end
if not current and round == ARGV[2] then
  redis.call('HSET', KEYS[1], 'message', ARGV[1])
  return {1, status}
end
local copies = raw and cjson.decode(raw) or {}
for _, copy in ipairs(copies) do
  if copy == ARGV[1] then return {2, status} end
end
table.insert(copies, ARGV[1])
redis.call('HSET', KEYS[1], 'copies', cjson.encode(copies))
return {2, status}
