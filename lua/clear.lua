-- clear.lua: a voucher just created in MySQL takes its id over whole. MySQL hands an id
-- out again when it lost the voucher that had it (restored from an older backup, a
-- failover that lost its creation): whatever Redis still holds under the id is that
-- lost sale's (its window, its buyers and their records, its queue, line and counts), and
-- none of it may be taken for the new one's, nor healed into its stock row. The creation
-- runs this before it installs each bucket (load.lua). Every key of core/src/sale/keys.rs
-- under the id goes: a sync of the lost sale holding its lease loses it here.
--
-- KEYS[1]  seckill:{<voucher>}:voucher   hash: the sale's terms and counts
-- KEYS[2]  seckill:{<voucher>}:buyers    hash: the buyers' records
-- KEYS[3]  seckill:{<voucher>}:queue     list: queued purchases
-- KEYS[4]  seckill:{<voucher>}:lease     string: the drain lock
-- KEYS[5]  seckill:{<voucher>}:sweep     string: the sweep lease
-- KEYS[6]  seckill:{<voucher>}:drawn     hash: the draw's winners not yet told
-- KEYS[7]  seckill:{<voucher>}:all-out   string: the all-out mark
-- KEYS[8]  seckill:{<voucher>}:metrics   hash: the sale's counters
-- KEYS[9]  seckill:{<voucher>}:absent    string: MySQL said no such voucher
-- KEYS[10] seckill:{<voucher>}:sync      string: the sync lease
-- KEYS[11] seckill:{<voucher>}:seen-out  hash: when each bucket of the sale was seen sold out
-- KEYS[12] seckill:{<voucher>}:entrants:1  sorted set: the draw's line of 1 unit
-- KEYS[13] seckill:{<voucher>}:entrants:2  sorted set: the draw's line of 2 units
-- KEYS[14] seckill:{<voucher>}:entrants:3  sorted set: the draw's line of 3 units
-- KEYS[15] seckill:{<voucher>}:entrants:4  sorted set: the draw's line of 4 units
-- KEYS[16] seckill:{<voucher>}:entrants:5  sorted set: the draw's line of 5 units
-- KEYS[17] seckill:{<voucher>}:entrants:6  sorted set: the draw's line of 6 units
-- KEYS[18] seckill:{<voucher>}:entrants:7  sorted set: the draw's line of 7 units
-- KEYS[19] seckill:{<voucher>}:entrants:8  sorted set: the draw's line of 8 units
-- KEYS[20] seckill:{<voucher>}:entrants:9  sorted set: the draw's line of 9 units
-- KEYS[21] seckill:{<voucher>}:entrants:10  sorted set: the draw's line of 10 units
-- ARGV[1]  of_sale  "" for a bucket of the sale being created; else the id of the lost sale
--                   the voucher must still be a later bucket of ("sale"), or nothing is
--                   removed: the creation clears the lost sale's other buckets too, so that
--                   a press routed by a list of them kept since (src/platform/p1/known_buckets.rs)
--                   meets none of them
--
-- The outcome lists of queued purchases ("done:<entry>") are left: they expire within a
-- minute and are named by tickets no other sale holds. Returns how many keys held state,
-- and the lost sale's other buckets ("<id>,<id>...", "" for none) when the voucher was its
-- first.

local of_sale = ARGV[1]

local held = hash_fields(KEYS[1], {'sale', 'buckets'})
if of_sale ~= '' and held.sale ~= of_sale then
  return {0, ''}
end
return {redis.call('DEL', unpack(KEYS)), held.buckets or ''}
