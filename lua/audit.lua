-- audit.lua: say whether MySQL lacks orders Redis learnt of (a failover to a replica that
-- lagged, a restore from an older backup), as every sweep finds it (core/src/returns.rs):
-- the caller compares Redis's "orders" read before MySQL's count with that count, so an
-- order committed between the two reads is never taken for a loss.
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: orders, returned_event, and "behind": the
--                                       orders MySQL lacks, while it lacks any (and
--                                       "heal_cursor", heal.lua's)
-- ARGV[1]  the orders MySQL lacks (0: none)
-- ARGV[2]  the last return MySQL's stock counts (an event id)
-- ARGV[3]  the sale's mark ("returned_event") as the sweep read it before MySQL's count
--
-- While MySQL lacks orders it may lack returns too, and its new primary hands out their
-- event ids again: the sale's mark goes back to MySQL's last return, so that restock.lua
-- applies the returns written under those ids. Returns 1 when the voucher is marked
-- behind, 0 when it is not (or Redis holds no sale for it): the caller lists it in
-- seckill:mysql-behind, or takes it out (GET /health lists them; a set of its own slot,
-- core/src/sale/listings.rs).

local voucher = KEYS[1]
local missing, counted, read = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if missing == 0 or redis.call('HEXISTS', voucher, 'stock') == 0 then
  redis.call('HDEL', voucher, 'behind', 'heal_cursor')
  return 0
end
redis.call('HSET', voucher, 'behind', missing)
-- Only a mark the sweep's MySQL read came after: a sweep whose lease lapsed meanwhile may
-- audit after another applied returns MySQL had not counted at its read, and moved back,
-- they would be given twice.
local mark = tonumber(redis.call('HGET', voucher, 'returned_event') or '0')
if mark > counted and mark == read then
  redis.call('HSET', voucher, 'returned_event', counted)
end
return 1
