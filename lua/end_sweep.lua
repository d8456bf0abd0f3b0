-- end_sweep.lua: a sweep of the voucher's expiries is over (restock.lua freed its lease):
-- wake every press that found it under way and waits for its end (core/src/purchase/,
-- "AwaitSweep"), so that each presses again for the units it gave back rather than hear
-- sold_out beside them.
--
-- KEYS[1]  seckill:{<voucher>}:sweep-wake  list: one wake-up; each waiting press's
--                                          BLMOVE takes it and puts it back, so that it
--                                          wakes them all
-- KEYS[2]  seckill:{<voucher>}:sweep       string: the sweep lease
-- ARGV[1]  wake_ms  how long the wake-up lasts, milliseconds: past it, a press that comes
--                   to wait waits for the next sweep
--
-- Another sweep holding the lease already is under way: its presses wait for its end, and
-- a wake-up now would send them pressing before it gave anything back (they would spend
-- their waits on it and hear sold_out); this sweep's waiters wait for that end too.
--
-- Returns 1 when it woke them, 0 when another sweep is under way.

local wake, lease = KEYS[1], KEYS[2]
local wake_ms = ARGV[1]

if redis.call('EXISTS', lease) == 1 then
  return 0
end
redis.call('DEL', wake)
redis.call('RPUSH', wake, 1)
redis.call('PEXPIRE', wake, wake_ms)
return 1
