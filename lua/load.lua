-- load.lua: install a voucher's sale terms in Redis: at its creation, and at the end of
-- an admin sync (after stage.lua merged the buyers MySQL holds into KEYS[2]'s hash).
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: stock, begin_ms, end_ms, initial_stock,
--                                       title, description
-- KEYS[2]  seckill:{<voucher>}:sync     string: the token of the sync that holds the
--                                       voucher's sync lease
-- KEYS[3]  seckill:{<voucher>}:absent  string: MySQL's word that no such voucher
--                                       existed, which this voucher now disproves
-- KEYS[4]  seckill:vouchers             set: the ids of the vouchers Redis holds a sale
--                                       for, which GET /metrics reports on (outside the
--                                       voucher's hash slot, like the order sequence)
-- KEYS[5]  seckill:stale                set: vouchers whose sale state is behind MySQL
-- KEYS[6]  seckill:{<voucher>}:buyers   hash: expires with the rest
-- KEYS[7]  seckill:{<voucher>}:metrics  hash: expires with the rest
-- ARGV[1]  stock left (from MySQL)
-- ARGV[2]  sale begin, unix milliseconds
-- ARGV[3]  sale end, unix milliseconds
-- ARGV[4]  initial stock
-- ARGV[5]  title
-- ARGV[6]  description
-- ARGV[7]  the sync's lease token; "" when a creation loads a new voucher
-- ARGV[8]  the voucher id
-- ARGV[9]  how long the sale's keys outlive its end, milliseconds (see admission.lua)
--
-- Buyers and the queue are left as they are: a sync only ever adds what MySQL knows
-- (stage.lua), so nothing a purchase recorded meanwhile is lost. The stock read from
-- MySQL still counts the units of purchases queued and not yet committed: Redis is then
-- too generous by those, which MySQL's verdict of sold_out corrects.
--
-- Returns 1 when loaded; 0, changing nothing, when the lease is no longer this sync's
-- (another sync took over, or Redis restarted and lost the pages merged so far).

local voucher, lease, absent, token = KEYS[1], KEYS[2], KEYS[3], ARGV[7]

if token ~= '' and redis.call('GET', lease) ~= token then
  return 0
end
redis.call('HSET', voucher, 'stock', ARGV[1], 'begin_ms', ARGV[2], 'end_ms', ARGV[3],
  'initial_stock', ARGV[4], 'title', ARGV[5], 'description', ARGV[6])
redis.call('DEL', absent)
redis.call('SADD', KEYS[4], ARGV[8])
-- MySQL's orders are recorded (stage.lua): Redis knows at least that many, and a sale
-- found behind MySQL is whole again. More than that, when purchases published during
-- the sync were counted since MySQL was read.
local orders = tonumber(ARGV[4]) - tonumber(ARGV[1])
if orders > tonumber(redis.call('HGET', voucher, 'orders') or '0') then
  redis.call('HSET', voucher, 'orders', orders)
end
redis.call('HDEL', voucher, 'stale')
local expire_at = tonumber(ARGV[3]) + tonumber(ARGV[9])
for _, key in ipairs({voucher, KEYS[6], KEYS[7]}) do
  redis.call('PEXPIREAT', key, expire_at)
end
redis.call('SREM', KEYS[5], ARGV[8])
if token ~= '' then
  redis.call('DEL', lease)
end
return 1
