-- unlock.lua: release a buyer's lock (compare-and-delete) and settle the reservation
-- that admission.lua made, according to how MySQL ended the purchase.
--
-- KEYS[1]  seckill:{<voucher>}:voucher       hash: stock, begin_ms, end_ms (and, for reads,
--                                            initial_stock, title, description)
-- KEYS[2]  seckill:{<voucher>}:buyers        hash: user id -> "p:<token>" | "o:<order id>" | "u"
-- KEYS[3]  seckill:{<voucher>}:pending       zset: user ids with a "p:" record
-- KEYS[4]  seckill:{<voucher>}:lock:<user>   string: the buyer's lock token
-- ARGV[1]  user id (decimal string)
-- ARGV[2]  lock token this attempt was admitted with; "" to record the order MySQL holds
--          for an unsettled buyer (outcome "duplicate")
-- ARGV[3]  outcome:
--            "ordered"    this attempt's order committed; the buyer is recorded as ordered
--            "duplicate"  MySQL already held an order for the buyer (ARGV[4]); recorded as
--                         ordered, and this reservation's unit stays taken: that order
--                         took a unit in MySQL which Redis never charged to an "o:"
--                         record (else admission would have said already_ordered), so
--                         it is the unit of this reservation (taken over from the
--                         attempt that committed) or one that went back to stock when
--                         that attempt's answer was lost (an undo after a lost reply,
--                         a reclaim, a Redis restart). Only a Redis that drops a
--                         buyer's "o:" record and keeps the stock (an eviction policy
--                         other than noeviction) makes this keep one unit too many.
--            "sold_out"   MySQL had no stock left; the reservation is dropped and Redis
--                         stock set to 0, so the flood after it is turned away in Redis
--                         (only while the voucher's state exists: a settlement never
--                         creates it)
--            "undo"       the purchase failed, or MySQL's answer was lost; the unit goes
--                         back and the buyer is left unsettled ("u"): if the purchase did
--                         commit, her next attempt that meets no stock asks MySQL
-- ARGV[4]  order id (decimal string) for "ordered" and "duplicate", else ""
--
-- Only the unit of the reservation made with this token is settled: one that expired
-- and was taken over or reclaimed since belongs to someone else now. An "ordered" or
-- "duplicate" outcome records the buyer's order whoever's reservation is there (MySQL
-- has it), ending a newer reservation of hers: that one's unit stands for this order.
-- Settling twice is a no-op.
-- Returns 1 if this token's reservation was settled, 0 if it was no longer there.

local voucher, buyers, pending, lock = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local user, token, outcome, order_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]

if redis.call('GET', lock) == token then
  redis.call('DEL', lock)
end

local mine = redis.call('HGET', buyers, user) == 'p:' .. token

if outcome == 'ordered' or outcome == 'duplicate' then
  -- MySQL holds the buyer's order whatever Redis thought, so record it even when the
  -- reservation is no longer ours.
  redis.call('HSET', buyers, user, 'o:' .. order_id)
  redis.call('ZREM', pending, user)
elseif mine then
  if outcome == 'undo' then
    redis.call('HSET', buyers, user, 'u')
  else
    redis.call('HDEL', buyers, user)
  end
  redis.call('ZREM', pending, user)
end

local loaded = redis.call('EXISTS', voucher) == 1
if mine and outcome == 'undo' and loaded then
  redis.call('HINCRBY', voucher, 'stock', 1)
end
if outcome == 'sold_out' and loaded then
  redis.call('HSET', voucher, 'stock', 0)
end

if mine then
  return 1
end
return 0
