-- adopt.lua: before a voucher's terms are installed (at its creation, and when a sync
-- starts, before it merges MySQL's buyers), remove the sale state Redis holds under its
-- id for another voucher: MySQL hands an id out again when it lost the voucher that had
-- it (restored from an older backup, a failover that lost its creation), and nothing of
-- that sale (its window, buyers, queue, counts, entrants) may be taken for this one's.
-- Each voucher row has a generation drawn at its creation (migrations/007_generation.sql),
-- which load.lua writes into the voucher hash.
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: "generation", the row its state is of
-- KEYS[2]  seckill:{<voucher>}:buyers   hash
-- KEYS[3]  seckill:{<voucher>}:queue    list
-- KEYS[4]  seckill:{<voucher>}:lease    string: the drain lock
-- KEYS[5]  seckill:{<voucher>}:sweep    string: the sweep lease
-- KEYS[6]  seckill:{<voucher>}:entrants sorted set
-- KEYS[7]  seckill:{<voucher>}:all-out  string
-- KEYS[8]  seckill:{<voucher>}:metrics  hash
-- KEYS[9]  seckill:{<voucher>}:absent   string
-- ARGV[1]  the voucher's generation, a decimal string ("0": a voucher from before them)
-- ARGV[2]  1 at the creation: a state that does not carry this generation is another
--          voucher's, even one written without a generation; 0 at a sync: a voucher hash
--          without one was written by the release before generations, for this voucher
--          (a sale in flight during the upgrade), and is kept
--
-- The sync lease and the outcome lists of queued purchases ("done:", which expire within
-- seconds and are named by tickets no other sale holds) are left. Returns 1 when it
-- removed another voucher's state, else 0.

local held = redis.call('HGET', KEYS[1], 'generation')
if held == ARGV[1] or (not held and ARGV[2] == '0') then
  return 0
end
if redis.call('DEL', unpack(KEYS)) > 0 then
  return 1
end
return 0
