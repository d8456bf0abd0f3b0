-- stage.lua: add a page of the buyers a sync read from MySQL to its own staging hash,
-- while the sync still holds the voucher's sync lease, and extend the lease.
--
-- KEYS[1]  seckill:{<voucher>}:buyers:staged:<token>  hash: user id -> "o:<order id>"
-- KEYS[2]  seckill:{<voucher>}:sync                   string: the lease holder's token
-- ARGV[1]  the sync's lease token
-- ARGV[2]  lease (and staging hash) lifetime from now, milliseconds
-- ARGV[3..] user id, "o:<order id>", user id, "o:<order id>", ...
--
-- Returns 1 when staged; 0, changing nothing, when the lease is no longer this sync's.

local staged, lease = KEYS[1], KEYS[2]
local token, lease_ms = ARGV[1], ARGV[2]

if redis.call('GET', lease) ~= token then
  return 0
end
if #ARGV > 2 then
  redis.call('HSET', staged, unpack(ARGV, 3))
  redis.call('PEXPIRE', staged, lease_ms)
end
redis.call('PEXPIRE', lease, lease_ms)
return 1
