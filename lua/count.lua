-- count.lua: count a purchase outcome that no other script saw (a queued purchase's
-- request that answered "busy" or "unavailable"), without leaving a counter that never
-- expires when Redis lost the sale meanwhile.
--
-- KEYS[1]  seckill:{<voucher>}:metrics  hash: counter name -> count
-- ARGV[1]  counter     the counter's name, "purchase:<outcome>"
-- ARGV[2]  orphans_ms  how long a counters hash with no expiry of its own lives,
--                      milliseconds
--
-- Returns the counter's new value.

local counter, orphans_ms = ARGV[1], ARGV[2]

local count = redis.call('HINCRBY', KEYS[1], counter, 1)
if redis.call('PTTL', KEYS[1]) == -1 then
  redis.call('PEXPIRE', KEYS[1], orphans_ms)
end
return count
