-- audit.lua: say whether MySQL lacks orders Redis learnt of (a failover to a replica that
-- lagged, a restore from an older backup), as every sweep finds it (core/src/returns.rs):
-- the caller compares Redis's "orders" read before MySQL's count with that count, so an
-- order committed between the two reads is never taken for a loss.
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: orders, returned_event, and "behind": the
--                                       orders MySQL lacks, while it lacks any (and
--                                       "heal_cursor", heal.lua's)
-- KEYS[2]  seckill:mysql-behind         set: the vouchers whose MySQL lacks orders
--                                       (GET /health lists them)
-- ARGV[1]  the orders MySQL lacks (0: none)
-- ARGV[2]  the last return MySQL's stock counts (an event id)
-- ARGV[3]  the voucher's id, its member of KEYS[2]
--
-- While MySQL lacks orders it may lack returns too, and its new primary hands out their
-- event ids again: the sale's mark goes back to MySQL's last return, so that restock.lua
-- applies the returns written under those ids. Returns 1 when the voucher is marked
-- behind, 0 when it is not (or Redis holds no sale for it).

local voucher, behind = KEYS[1], KEYS[2]
local missing, counted, voucher_id = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
if missing == 0 or redis.call('HEXISTS', voucher, 'stock') == 0 then
  redis.call('HDEL', voucher, 'behind', 'heal_cursor')
  redis.call('SREM', behind, voucher_id)
  return 0
end
redis.call('HSET', voucher, 'behind', missing)
redis.call('SADD', behind, voucher_id)
if tonumber(redis.call('HGET', voucher, 'returned_event') or '0') > counted then
  redis.call('HSET', voucher, 'returned_event', counted)
end
return 1
