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
-- KEYS[6]  seckill:{<voucher>}:entrants  sorted set: the draw's line
-- KEYS[7]  seckill:{<voucher>}:drawn     hash: the draw's winners not yet told
-- KEYS[8]  seckill:{<voucher>}:all-out   string: the all-out mark
-- KEYS[9]  seckill:{<voucher>}:metrics   hash: the sale's counters
-- KEYS[10] seckill:{<voucher>}:absent    string: MySQL said no such voucher
-- KEYS[11] seckill:{<voucher>}:sync      string: the sync lease
-- KEYS[12] seckill:{<voucher>}:seen-out  hash: when each bucket of the sale was seen sold out
-- ARGV[1]  "" for a bucket of the sale being created; else the id of the lost sale the
--          voucher must still be a later bucket of ("sale"), or nothing is removed: the
--          creation clears the lost sale's other buckets too, so that a press routed by
--          a list of them kept since (src/p1/known_buckets.rs) meets none of them
--
-- The outcome lists of queued purchases ("done:<entry>") are left: they expire within a
-- minute and are named by tickets no other sale holds. Returns how many keys held state,
-- and the lost sale's other buckets ("<id>,<id>...", "" for none) when the voucher was its
-- first.

local held = redis.call('HMGET', KEYS[1], 'sale', 'buckets')
if ARGV[1] ~= '' and held[1] ~= ARGV[1] then
  return {0, ''}
end
return {redis.call('DEL', unpack(KEYS)), held[2] or ''}
