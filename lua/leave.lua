-- leave.lua: takes a buyer out of the sale's line (docs/design.md, "The line"), whatever
-- quantity she waits for. A buyer the line already handed units to is in it no longer:
-- her purchase stands.
--
-- KEYS[1]  seckill:{<voucher>}:metrics     hash: the voucher's counters; a leave counts
--                                          "line:left"
-- KEYS[2]  seckill:{<voucher>}:entrants:1  sorted set: the line of those asking for 1 unit
-- KEYS[3]  seckill:{<voucher>}:entrants:2  the line of those asking for 2 units
-- KEYS[4]  seckill:{<voucher>}:entrants:3  the line of those asking for 3 units
-- KEYS[5]  seckill:{<voucher>}:entrants:4  the line of those asking for 4 units
-- KEYS[6]  seckill:{<voucher>}:entrants:5  the line of those asking for 5 units
-- KEYS[7]  seckill:{<voucher>}:entrants:6  the line of those asking for 6 units
-- KEYS[8]  seckill:{<voucher>}:entrants:7  the line of those asking for 7 units
-- KEYS[9]  seckill:{<voucher>}:entrants:8  the line of those asking for 8 units
-- KEYS[10] seckill:{<voucher>}:entrants:9  the line of those asking for 9 units
-- KEYS[11] seckill:{<voucher>}:entrants:10  the line of those asking for 10 units
-- ARGV[1]  user  user id (decimal string)
--
-- Returns 1 when she left the line, 0 when she was not in it.

local metrics = KEYS[1]
local user = ARGV[1]

for line = 2, #KEYS do
  if redis.call('ZREM', KEYS[line], user) == 1 then
    redis.call('HINCRBY', metrics, 'line:left', 1)
    return 1
  end
end
return 0
