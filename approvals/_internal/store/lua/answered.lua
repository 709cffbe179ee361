-- answered: a retry that answers a reviewer's question was posted in the asked request's
-- thread: mark the asked request answered (once) and queue a redraw of its message ("answered
-- in the thread"), as an `answered` outbox entry: a redraw, never counted as a decision.
-- KEYS[1] the asked request's hash   KEYS[2] outbox stream
-- ARGV[1] the asked request's id   ARGV[2] `Answered` JSON (the retry's id)
-- ARGV[3] outbox max length   ARGV[4] the outbox's TTL (s), set when it has none
-- Returns 1 when marked now, 0 when it was already (or the request is gone, or not `asked`).
local f = redis.call('HMGET', KEYS[1], 'status', 'answered', 'channel')
if f[1] ~= 'asked' or f[2] then return 0 end
redis.call('HSET', KEYS[1], 'answered', ARGV[2])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'op', 'answered', 'id', ARGV[1],
  'channel', f[3] or '')
if redis.call('TTL', KEYS[2]) == -1 then redis.call('EXPIRE', KEYS[2], ARGV[4]) end
return 1
