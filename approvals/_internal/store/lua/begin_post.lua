-- begin_post: before one attempt to post a request's Slack message, take its post lock and
-- count the attempt, so a later attempt knows an earlier one may have posted.
-- KEYS[1] request hash   KEYS[2] post lock of this request and route round
-- ARGV[1] holder ("consumer run-token")   ARGV[2] lock seconds   ARGV[3] escalations
-- ARGV[4] channel   ARGV[5] now (epoch s)   ARGV[6] a holder known to be gone ('' for none)
-- Returns {'gone'} | {'closed', status} | {'moved'} | {'posted'} | {'busy', holder}
--       | {'go', first earlier attempt (epoch s) or '', earlier attempts}
local field = 'posting:' .. ARGV[3]
local f = redis.call('HMGET', KEYS[1], 'status', 'escalations', 'message', field,
  'digest:' .. ARGV[3])
local status, raw = f[1], f[4]
if not status then return {'gone'} end
if status ~= 'pending' then return {'closed', status} end
if (f[2] or '0') ~= ARGV[3] then return {'moved'} end
-- A row of a digest message (digest_add.lua) is its place this round: nothing to post.
if f[3] or f[5] then return {'posted'} end
local held = redis.call('GET', KEYS[2])
if held and held ~= ARGV[1] and held ~= ARGV[6] then return {'busy', held} end
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
local first, n = ARGV[5], 0
if raw then
  local before = cjson.decode(raw)
  first, n = before.first, tonumber(before.n)
end
redis.call('HSET', KEYS[1], field,
  cjson.encode({first = first, n = n + 1, channel = ARGV[4]}))
if raw then return {'go', first, tostring(n)} end
return {'go', '', '0'}
