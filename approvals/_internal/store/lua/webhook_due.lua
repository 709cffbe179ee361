-- webhook_due: move webhook retries whose time has come from the retry set onto the queue.
-- KEYS[1] retry zset (delivery id -> due, epoch s)   KEYS[2] webhook queue stream
-- ARGV[1] now (epoch s)   ARGV[2] most to move   ARGV[3] stream max length   ARGV[4] stream TTL (s)
-- Each due id is removed and queued in one step, so running this on every replica at once
-- queues each retry exactly once. Delivery ids are 'msg_' .. request id; entries carry the
-- request id. Returns how many moved.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(due) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'op', 'retry', 'id', string.sub(id, 5))
end
if #due > 0 then redis.call('EXPIRE', KEYS[2], ARGV[4]) end
return #due
