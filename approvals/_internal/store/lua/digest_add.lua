-- digest_add: list a request whose post would wait behind the channel's pacing as a row of
-- the channel's open digest message (a new digest when the open one is full or posted too
-- long ago), and mark that digest to be drawn. The row then is the request's place in Slack
-- for this route round: no message of its own is posted (begin_post.lua answers 'posted').
-- KEYS[1] request hash   KEYS[2] request's post lock (this round)   KEYS[3] channel digest index
-- KEYS[4] the open digest as the caller read it (any key when none)   KEYS[5] a fresh digest
-- KEYS[6] dirty digests zset
-- ARGV[1] request id   ARGV[2] round (escalations)   ARGV[3] holder   ARGV[4] open digest id
-- as read ('' for none)   ARGV[5] fresh digest id   ARGV[6] most rows per digest
-- ARGV[7] now (epoch s)   ARGV[8] seconds a posted digest still takes rows   ARGV[9] TTL (s)
-- ARGV[10] channel   ARGV[11] a holder known to be gone ('' for none)
-- Returns {'added', digest id, row} | {'already', digest id} | {'retry'} (the open digest
-- changed: read it again) | {'gone'} | {'closed'} | {'moved'} | {'posted'} | {'attempted'}
-- (an earlier attempt to post it on its own may have landed: that path adopts it)
-- | {'busy', holder}
local round = ARGV[2]
local f = redis.call('HMGET', KEYS[1], 'status', 'escalations', 'message',
  'digest:' .. round, 'posting:' .. round)
if not f[1] then return {'gone'} end
if f[1] ~= 'pending' then return {'closed'} end
if (f[2] or '0') ~= round then return {'moved'} end
if f[3] then return {'posted'} end
if f[4] then return {'already', f[4]} end
if f[5] then return {'attempted'} end
local held = redis.call('GET', KEYS[2])
if held and held ~= ARGV[3] and held ~= ARGV[11] then return {'busy', held} end
local open = redis.call('HGET', KEYS[3], 'open') or ''
if open ~= ARGV[4] then return {'retry'} end
local now, ttl = tonumber(ARGV[7]), tonumber(ARGV[9])
local id, key = open, KEYS[4]
local usable = false
if open ~= '' then
  local d = redis.call('HMGET', key, 'n', 'posted_at')
  if d[1] and tonumber(d[1]) < tonumber(ARGV[6])
      and (not d[2] or now - tonumber(d[2]) < tonumber(ARGV[8])) then
    usable = true
  end
end
if not usable then
  id, key = ARGV[5], KEYS[5]
  redis.call('HSET', key, 'channel', ARGV[10], 'created', ARGV[7], 'n', 0, 'version', 0,
    'drawn', 0)
  redis.call('HSET', KEYS[3], 'open', id)
end
local n = redis.call('HINCRBY', key, 'n', 1)
redis.call('HSET', key, 'row:' .. n, ARGV[1] .. ' ' .. round)
redis.call('HINCRBY', key, 'version', 1)
redis.call('HSET', KEYS[1], 'digest:' .. round, id)
if redis.call('HGET', key, 'parked') then
  -- scheduled only for its later look for late copies (digest_drawn.lua): a row is due now
  redis.call('HDEL', key, 'parked')
  redis.call('ZADD', KEYS[6], now, id)
else
  redis.call('ZADD', KEYS[6], 'NX', now, id)
end
redis.call('EXPIRE', key, ttl)
redis.call('EXPIRE', KEYS[3], ttl)
redis.call('EXPIRE', KEYS[6], ttl)
return {'added', id, n}
