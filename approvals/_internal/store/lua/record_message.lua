-- record_message: note a Slack message of a request (posted or found in history) and free
-- the post lock. The first copy of the current route round is the message; any other copy
-- (a duplicate, or a post that landed after an escalation) is kept in 'copies' so the
-- outcome is drawn on it too. With the message, the reviewers to DM about it are recorded
-- as owed (`dm:<round>:<user>`, each deleted once its DM is sent: `Posting.dm_sent`), so a
-- replica that takes the entry over after a crash sends the ones not sent yet.
-- KEYS[1] request hash   KEYS[2] post lock
-- ARGV[1] message JSON ({"channel","ts"})   ARGV[2] escalations it was posted for
-- ARGV[3] reviewers to DM (JSON list; '' for none)
-- Returns {0} when the request is gone | {1, status, DMs owed} as the message
--       | {2, status} as a copy
redis.call('DEL', KEYS[2])
local f = redis.call('HMGET', KEYS[1], 'status', 'message', 'escalations', 'copies')
local status, current, round, raw = f[1], f[2], f[3] or '0', f[4]
if not status then return {0} end
local prefix = 'dm:' .. ARGV[2] .. ':'
if current == ARGV[1] then
  local owed = {}
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(field, 1, #prefix) == prefix then
      table.insert(owed, string.sub(field, #prefix + 1))
    end
  end
  return {1, status, owed}
end
if not current and round == ARGV[2] then
  redis.call('HSET', KEYS[1], 'message', ARGV[1])
  local owed = {}
  if ARGV[3] ~= '' then
    for _, user in ipairs(cjson.decode(ARGV[3])) do
      redis.call('HSET', KEYS[1], prefix .. user, 1)
      table.insert(owed, user)
    end
  end
  return {1, status, owed}
end
local copies = raw and cjson.decode(raw) or {}
for _, copy in ipairs(copies) do
  if copy == ARGV[1] then return {2, status} end
end
table.insert(copies, ARGV[1])
redis.call('HSET', KEYS[1], 'copies', cjson.encode(copies))
return {2, status}
