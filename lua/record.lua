-- record.lua: what Redis knows of a buyer's order of a voucher, for GET
-- /vouchers/{id}/orders/mine, so that only a buyer who holds an order costs a MySQL read.
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: the sale's terms, "stale" when behind MySQL
-- KEYS[2]  seckill:{<voucher>}:buyers   hash: user id -> "q:<ticket>" | "o:<order id>" |
--                                       "e:"/"c:"/"x:"/"l:<order id>" | "w:<bucket>" |
--                                       "p:<walks>" (walks)
-- KEYS[3]  seckill:{<voucher>}:absent   string: MySQL said no such voucher (a minute)
-- KEYS[4]  seckill:{<slot tag>}:highest-voucher  string: the highest voucher id known to exist
-- ARGV[1]  user        user id
-- ARGV[2]  voucher_id  the voucher id (a canonical decimal)
--
-- Returns {"order", "<order id>"} when her order is recorded (live, cancelled or expired:
-- MySQL tells which); {"none"} when the sale is
-- whole in Redis and she holds no order (a purchase still queued is not one yet);
-- {"unknown"} when no such voucher exists (as admission.lua decides it), or the voucher
-- is a later bucket of a sale ("sale": no voucher of its own); {"missing"}
-- when Redis holds no whole sale state for it, or her order may be another bucket's (a
-- sale of several buckets: docs/design.md, "Buckets"): MySQL knows.

local user, voucher_id = ARGV[1], ARGV[2]

local state = hash_fields(KEYS[1], {'stock', 'begin_ms', 'end_ms', 'stale', 'buckets', 'sale'})
if state.sale then
  return {'unknown'}
end
if not (state.stock and state.begin_ms and state.end_ms) or state.stale then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    return {'unknown'}
  end
  -- Decimal strings compared by length, then by digits: Lua numbers lose ids above 2^53.
  local highest = redis.call('GET', KEYS[4])
  if highest and (#voucher_id > #highest
      or (#voucher_id == #highest and voucher_id > highest)) then
    return {'unknown'}
  end
  return {'missing'}
end
local record = redis.call('HGET', KEYS[2], user)
local kind = kind_of(record)
-- The records that name an order of hers (or one lost, which MySQL no longer holds).
local orders = {[ORDERED] = true, [ELSEWHERE] = true, [CANCELLED] = true, [EXPIRED] = true,
  [LOST] = true}
if orders[kind] then
  return {'order', named_by(record)}
end
-- "w:", "p:": her purchase may be another bucket's (admission.lua's walks).
if state.buckets or kind == POINTED or kind == WALKING then
  return {'missing'}
end
return {'none'}
