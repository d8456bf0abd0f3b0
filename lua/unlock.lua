-- unlock.lua: release a voucher's drain lock (its lease), but only the holder's own: a
-- drainer that gives up (MySQL failed twice, an entry it cannot commit) unlocks at once,
-- so that a waiting purchase takes the queue over instead of waiting out the lock's
-- lifetime. A lock that lapsed and was taken by another request is left alone.
--
-- KEYS[1]  seckill:{<voucher>}:lease  string: the drainer's token
-- ARGV[1]  token  the token this drainer holds the lock under
--
-- Returns 1 when the lock was this token's and is released, else 0.

local token = ARGV[1]

if redis.call('GET', KEYS[1]) == token then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
