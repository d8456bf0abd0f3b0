-- end_sweep.lua: a sweep of the voucher's expiries is over (restock.lua freed its lease):
-- wake every press that found it under way and waits for its end (core/src/purchase/,
-- "AwaitSweep"), so that each presses again for the units it gave back rather than hear
-- sold_out beside them.
--
-- KEYS[1]  seckill:{<voucher>}:sweep-wake  list: one wake-up; each waiting press's
--                                          BLMOVE takes it and puts it back, so that it
--                                          wakes them all
-- ARGV[1]  wake_ms  how long the wake-up lasts, milliseconds: past it, a press that comes
--                   to wait waits for the next sweep
--
-- Returns 1.

local wake_ms = ARGV[1]

redis.call('DEL', KEYS[1])
redis.call('RPUSH', KEYS[1], 1)
redis.call('PEXPIRE', KEYS[1], wake_ms)
return 1
