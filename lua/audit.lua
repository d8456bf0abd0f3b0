-- audit.lua: say whether MySQL lacks orders Redis learnt of (a failover to a replica that
-- lagged, a restore from an older backup), as every sweep finds it (core/src/returns.rs):
-- the caller compares Redis's "orders" read before MySQL's count with that count, so an
-- order committed between the two reads is never taken for a loss. And set Redis's stock
-- to MySQL's units left when the two should agree and do not (below).
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: stock, orders, returned_event, and "behind":
--                                       the orders MySQL lacks, while it lacks any (and
--                                       "heal_cursor", heal.lua's)
-- KEYS[2]  seckill:{<voucher>}:queue    list: the purchases queued
-- KEYS[3]  seckill:{<voucher>}:metrics  hash: "units:restored" (units Redis lacked, given
--                                       back), "units:withdrawn" (units it had over MySQL's)
-- KEYS[4]  seckill:{<voucher>}:all-out  string: this bucket's buyers hear sold_out without
--                                       trying the sale's other buckets (admission.lua);
--                                       a unit given back clears it
-- ARGV[1]  missing         the orders MySQL lacks (0: none)
-- ARGV[2]  counted_return  the last return MySQL's stock counts (an event id)
-- ARGV[3]  read_mark       the sale's mark ("returned_event") as the sweep read it before
--                          MySQL's count
-- ARGV[4]  mysql_stock     the units MySQL had left at its count
-- ARGV[5]  mysql_orders    the orders MySQL counted
--
-- While MySQL lacks orders it may lack returns too, and its new primary hands out their
-- event ids again: the sale's mark goes back to MySQL's last return, so that restock.lua
-- applies the returns written under those ids. Returns 1 when the voucher is marked
-- behind, 0 when it is not (or Redis holds no sale for it): the caller lists it in
-- seckill:mysql-behind, or takes it out (GET /health lists them; a set of its own slot,
-- core/src/sale/listings.rs).
--
-- Units: with nothing queued, every order MySQL counted known to Redis and no other, and
-- every return MySQL's stock counts applied and no other, Redis's stock is MySQL's units
-- left. A purchase, a publication or a return since MySQL's count breaks one of the
-- three, and this leaves the stock to the next audit. Otherwise a difference is units
-- lost (a give-back skipped, a rollback) or left over (a sync while purchases were
-- queued): the stock becomes MySQL's, and the difference is counted.

local voucher = KEYS[1]
local missing, counted_return, read_mark, mysql_stock, mysql_orders =
  tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local state = hash_fields(voucher, {'stock', 'orders', 'returned_event'})
if not state.stock then
  redis.call('HDEL', voucher, 'behind', 'heal_cursor')
  return 0
end
local stock = tonumber(state.stock)
if stock ~= mysql_stock and tonumber(state.orders or '0') == mysql_orders
    and tonumber(state.returned_event or '0') == counted_return
    and redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('HSET', voucher, 'stock', mysql_stock)
  if mysql_stock > stock then
    redis.call('HINCRBY', KEYS[3], 'units:restored', mysql_stock - stock)
    clear_all_out(KEYS[4])
  else
    redis.call('HINCRBY', KEYS[3], 'units:withdrawn', stock - mysql_stock)
  end
end
if missing == 0 then
  redis.call('HDEL', voucher, 'behind', 'heal_cursor')
  return 0
end
redis.call('HSET', voucher, 'behind', missing)
-- Only a mark the sweep's MySQL read came after: a sweep whose lease lapsed meanwhile may
-- audit after another applied returns MySQL had not counted at its read, and moved back,
-- they would be given twice.
local mark = tonumber(redis.call('HGET', voucher, 'returned_event') or '0')
if mark > counted_return and mark == read_mark then
  redis.call('HSET', voucher, 'returned_event', counted_return)
end
return 1
