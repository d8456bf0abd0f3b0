-- probed.lua: keep what one request learnt from MySQL about a voucher id Redis holds no
-- sale for, so that the requests of the next minute need not ask: whether the voucher is
-- absent, and the highest voucher id MySQL has handed out (ids are AUTO_INCREMENT:
-- admission answers "unknown" for any id above it without asking anyone).
--
-- KEYS[1]  seckill:{<voucher>}:absent  string: MySQL said no such voucher
-- KEYS[2]  seckill:{<slot tag>}:highest-voucher  string: the highest voucher id known to exist
-- ARGV[1]  absent     1 when MySQL has no voucher of this id, else 0
-- ARGV[2]  absent_ms  how long its absence is kept, milliseconds
-- ARGV[3]  highest    MySQL's highest voucher id (a canonical decimal), "0" when it has
--                     none: every id is then unknown until a creation raises it
--
-- Returns 1.

local absent, absent_ms, highest = ARGV[1], ARGV[2], ARGV[3]

if absent == '1' then
  redis.call('SET', KEYS[1], '1', 'PX', absent_ms)
end
local current = redis.call('GET', KEYS[2])
-- Decimal strings compared by length, then by digits: Lua numbers lose ids above 2^53.
if not current or #highest > #current or (#highest == #current and highest > current) then
  redis.call('SET', KEYS[2], highest)
end
return 1
