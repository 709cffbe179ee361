-- set_fields: set hash fields on a request only if it exists (never resurrect an expired one).
-- KEYS[1] request hash
-- ARGV[1..n] field, value pairs
-- Returns 1 when written, 0 when there is no such request.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
