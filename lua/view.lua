-- view.lua: what a product page shows of a voucher, read from its sale state with the
-- Redis clock, in one round trip.
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: stock, begin_ms, end_ms, initial_stock,
--                                       title, description
-- ARGV     none
--
-- Returns {stock, begin_ms, end_ms, initial_stock, title, description, now_ms}, or {}
-- when Redis has no complete state for the voucher, or one marked "stale".

local fields = redis.call('HMGET', KEYS[1], 'stock', 'begin_ms', 'end_ms', 'initial_stock',
  'title', 'description', 'stale')
-- A sale found behind MySQL shows MySQL's figures until a sync.
if fields[7] then
  return {}
end
for i = 1, 6 do
  if not fields[i] then
    return {}
  end
end
local time = redis.call('TIME')
fields[7] = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
return fields
