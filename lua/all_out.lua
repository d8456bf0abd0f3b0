-- all_out.lua: a press found every bucket of a sale sold out (docs/design.md, "Buckets"):
-- the buyer's bucket answers sold_out by itself for a moment, so that the sold-out flood
-- costs one script a press instead of one per bucket. Only while that bucket is still
-- sold out: a unit given back to it since the press found it empty (restock.lua clears
-- the mark) is sold to its buyers at once.
--
-- KEYS[1]  seckill:{<bucket>}:voucher  hash: stock
-- KEYS[2]  seckill:{<bucket>}:all-out  string: the mark
-- ARGV[1]  how long the mark lasts, milliseconds
--
-- Returns 1 when marked, 0 when the bucket has a unit again (or no sale).

local stock = tonumber(redis.call('HGET', KEYS[1], 'stock') or '')
if not stock or stock > 0 then
  return 0
end
redis.call('SET', KEYS[2], 1, 'PX', ARGV[1])
return 1
