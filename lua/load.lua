-- load.lua: install a voucher's sale state in Redis, replacing whatever was there.
-- Used when a voucher is created and by the admin sync after Redis lost data.
--
-- KEYS[1]  seckill:{<voucher>}:voucher                hash: stock, begin_ms, end_ms,
--                                                     initial_stock, title, description
-- KEYS[2]  seckill:{<voucher>}:buyers                 hash: user id -> "o:<order id>", plus
--                                                     the "p:" records of reservations in flight
-- KEYS[3]  seckill:{<voucher>}:pending                zset: reservations in flight (kept)
-- KEYS[4]  seckill:{<voucher>}:buyers:staged:<token>  hash this sync filled (stage.lua) with
--                                                     the buyers read from MySQL
-- KEYS[5]  seckill:{<voucher>}:sync                   string: the token of the sync that
--                                                     holds the voucher's sync lease
-- ARGV[1]  stock left (from MySQL)
-- ARGV[2]  sale begin, unix milliseconds
-- ARGV[3]  sale end, unix milliseconds
-- ARGV[4]  initial stock
-- ARGV[5]  title
-- ARGV[6]  description
-- ARGV[7]  how many buyers this sync staged
-- ARGV[8]  the sync's lease token; "" when a creation loads a new voucher
--
-- Returns 1 when loaded; 0, changing nothing, when the lease is no longer this sync's
-- (another sync took over, or Redis restarted) or its staged buyers are not all there.

local voucher, buyers, pending, staged, lease = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local staged_count, token = tonumber(ARGV[7]), ARGV[8]

if token ~= '' and redis.call('GET', lease) ~= token then
  return 0
end
-- Never swap in fewer buyers than MySQL gave: that would forget orders.
if redis.call('HLEN', staged) ~= staged_count then
  return 0
end

-- Reservations in flight are kept: their purchases are still on their way to MySQL, and
-- a buyer forgotten now could commit after the buyers were read and never hear her
-- order. Their units count twice until they settle (in the stock read from MySQL and in
-- the reservation), so Redis is at most that many units too generous: the sell-out
-- corrects it. A buyer MySQL already has an order for keeps only that.
local inflight = redis.call('ZRANGE', pending, 0, -1)
local records = {}
if #inflight > 0 then
  records = redis.call('HMGET', buyers, unpack(inflight))
end
if staged_count > 0 then
  redis.call('RENAME', staged, buyers)
else
  redis.call('DEL', buyers)
end
for i, user in ipairs(inflight) do
  local record = records[i]
  local kept = record and string.sub(record, 1, 2) == 'p:'
    and redis.call('HSETNX', buyers, user, record) == 1
  if not kept then
    redis.call('ZREM', pending, user)
  end
end
redis.call('HSET', voucher, 'stock', ARGV[1], 'begin_ms', ARGV[2], 'end_ms', ARGV[3],
  'initial_stock', ARGV[4], 'title', ARGV[5], 'description', ARGV[6])
if token ~= '' then
  redis.call('DEL', lease)
end
return 1
