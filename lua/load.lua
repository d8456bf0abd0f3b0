-- load.lua: install a voucher's sale state in Redis, replacing whatever was there.
-- Used when a voucher is created and by the admin sync after Redis lost data.
--
-- KEYS[1]  seckill:{<voucher>}:voucher        hash: stock, begin_ms, end_ms
-- KEYS[2]  seckill:{<voucher>}:buyers         hash: user id -> "o:<order id>"
-- KEYS[3]  seckill:{<voucher>}:pending        zset: reservations in flight (cleared)
-- KEYS[4]  seckill:{<voucher>}:buyers:staged  hash the caller filled with the buyers read
--                                             from MySQL; absent when there are none
-- ARGV[1]  stock left (from MySQL)
-- ARGV[2]  sale begin, unix milliseconds
-- ARGV[3]  sale end, unix milliseconds
--
-- Returns 1.

redis.call('DEL', KEYS[3])
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('RENAME', KEYS[4], KEYS[2])
else
  redis.call('DEL', KEYS[2])
end
redis.call('HSET', KEYS[1], 'stock', ARGV[1], 'begin_ms', ARGV[2], 'end_ms', ARGV[3])
return 1
