-- admission.lua: decide in one atomic step whether a buyer may go on to MySQL,
-- and if so reserve a unit, lock the buyer and allocate the order id.
--
-- KEYS[1]  seckill:{<voucher>}:voucher       hash: stock, begin_ms, end_ms
-- KEYS[2]  seckill:{<voucher>}:buyers        hash: user id -> "p:<token>" (reservation in flight)
--                                                           | "o:<order id>" (ordered)
-- KEYS[3]  seckill:{<voucher>}:pending       zset: user id of each "p:" record, scored by its expiry (ms)
-- KEYS[4]  seckill:{<voucher>}:lock:<user>   string: the buyer's lock token, with a TTL
-- KEYS[5]  seckill:order-seq                 prefix of the global per-day order sequence;
--                                            the script appends ":<days since 1970>"
-- ARGV[1]  user id (decimal string)
-- ARGV[2]  lock token (uuid)
-- ARGV[3]  reservation and lock TTL in milliseconds
--
-- Returns one of:
--   {"admitted", <unix seconds>, <sequence>}  a unit is reserved; the caller builds the
--                                            64-bit order id (Lua numbers are doubles)
--   {"missing"}                              no sale state in Redis for this voucher
--   {"not_started"} | {"ended"} | {"sold_out"}
--   {"already_ordered", "<order id>"}
--   {"busy", <lock ms left>}                 the buyer's previous attempt is still in flight
--
-- Invariant kept by every script: each "p:" record holds exactly one unit taken from
-- stock and has an entry in KEYS[3]; "o:" records hold none and have no entry.

local voucher, buyers, pending, lock = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local user, token, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])

local state = redis.call('HMGET', voucher, 'stock', 'begin_ms', 'end_ms')
if not state[1] then
  return {'missing'}
end

local time = redis.call('TIME')
local seconds = tonumber(time[1])
local now = seconds * 1000 + math.floor(tonumber(time[2]) / 1000)
if now < tonumber(state[2]) then
  return {'not_started'}
end
if now >= tonumber(state[3]) then
  return {'ended'}
end

local record = redis.call('HGET', buyers, user)
if record then
  if string.sub(record, 1, 2) == 'o:' then
    return {'already_ordered', string.sub(record, 3)}
  end
  local held = redis.call('PTTL', lock)
  if held > 0 then
    return {'busy', held}
  end
  -- The buyer's previous attempt outlived its lock without settling: this attempt
  -- takes that reservation over, unit included. MySQL's unique key settles the race
  -- if the old attempt still commits.
elseif tonumber(state[1]) > 0 then
  redis.call('HINCRBY', voucher, 'stock', -1)
else
  -- Sold out, unless an abandoned reservation has expired: its unit passes to this buyer.
  local expired = redis.call('ZRANGEBYSCORE', pending, '-inf', now, 'LIMIT', 0, 1)[1]
  if not expired then
    return {'sold_out'}
  end
  redis.call('HDEL', buyers, expired)
  redis.call('ZREM', pending, expired)
end

redis.call('HSET', buyers, user, 'p:' .. token)
redis.call('ZADD', pending, now + ttl, user)
redis.call('SET', lock, token, 'PX', ttl)

-- A day key that is new, or was lost in a Redis restart, starts from the time of day
-- (8 per ms) rather than 1, so a restart does not hand out the numbers used earlier in
-- the same second. Room left: 2^32 - 8 * 86,400,000 = 3.6 billion ids a day.
local sequence_key = KEYS[5] .. ':' .. math.floor(seconds / 86400)
local sequence = redis.call('INCR', sequence_key)
if sequence == 1 then
  sequence = (now % 86400000) * 8 + 1
  redis.call('SET', sequence_key, sequence, 'EX', 172800)
end
return {'admitted', seconds, sequence}
