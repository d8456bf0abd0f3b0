-- raise.lua: raise a highest voucher id to one MySQL has handed out, never lower it (a
-- Redis Cluster's deployment-wide copy, after a creation or a lookup raised a slot's).
--
-- KEYS[1]  seckill:{seckill}:highest-voucher  string: the highest voucher id known
-- ARGV[1]  highest  a voucher id MySQL has handed out (a canonical decimal)
--
-- Returns 1.

local highest = ARGV[1]

local current = redis.call('GET', KEYS[1])
-- Decimal strings compared by length, then by digits: Lua numbers lose ids above 2^53.
if not current or #highest > #current or (#highest == #current and highest > current) then
  redis.call('SET', KEYS[1], highest)
end
return 1
