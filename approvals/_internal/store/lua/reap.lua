-- reap: take over the outbox entries of a consumer whose replica is gone, and remove that
-- consumer from the group once it holds none (never while its heartbeat is alive).
-- KEYS[1] outbox stream   KEYS[2] the gone replica's heartbeat key
-- ARGV[1] group   ARGV[2] gone consumer   ARGV[3] this consumer   ARGV[4] most entries
-- Returns {-1} if the replica is alive after all, else {claimed, removed (1/0)}
if redis.call('EXISTS', KEYS[2]) == 1 then return {-1} end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', ARGV[4], ARGV[2])
local ids = {}
for i, row in ipairs(pending) do ids[i] = row[1] end
local claimed, found = 0, #ids
if found > 0 then
  -- JUSTID keeps each entry's delivery count (its backoff); IDLE makes it due at once.
  ids[#ids + 1] = 'IDLE'
  ids[#ids + 1] = '86400000'
  ids[#ids + 1] = 'JUSTID'
  claimed = #redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, unpack(ids))
end
if found < tonumber(ARGV[4]) then
  redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
  return {claimed, 1}
end
return {claimed, 0}
