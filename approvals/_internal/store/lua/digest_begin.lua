-- digest_begin: before drawing a digest's message (posting it, or updating it), take its draw
-- lock; a first post is counted, so a later attempt knows an earlier one may have posted.
-- KEYS[1] digest hash   KEYS[2] the digest's draw lock
-- ARGV[1] holder   ARGV[2] lock seconds   ARGV[3] now (epoch s)   ARGV[4] a holder known to
-- be gone ('' for none)
-- Returns {'gone'} | {'busy', holder}
--       | {'go', ts or '', version, channel, first earlier post attempt or '', drawn,
--          second copies still to retire (JSON list of ts) or '',
--          when to look for late copies again (JSON {at, since}) or '',
--          reviewers still owed a DM about the message (list of user ids)}
local d = redis.call('HMGET', KEYS[1], 'channel', 'ts', 'version', 'posting', 'drawn',
  'strays', 'recheck')
if not d[1] then return {'gone'} end
local held = redis.call('GET', KEYS[2])
if held and held ~= ARGV[1] and held ~= ARGV[4] then return {'busy', held} end
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[2])
local earlier = ''
if not d[2] then
  local first, n = ARGV[3], 0
  if d[4] then
    local before = cjson.decode(d[4])
    first, n, earlier = before.first, tonumber(before.n), before.first
  end
  redis.call('HSET', KEYS[1], 'posting', cjson.encode({first = first, n = n + 1}))
end
local owed = {}
if d[2] then
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(field, 1, 3) == 'dm:' then table.insert(owed, string.sub(field, 4)) end
  end
end
return {'go', d[2] or '', d[3] or '0', d[1], earlier, d[5] or '0', d[6] or '', d[7] or '', owed}
