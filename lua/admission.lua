-- admission.lua: decide in one atomic step whether a buyer may go on to MySQL,
-- and if so reserve a unit, lock the buyer and allocate the order id.
--
-- KEYS[1]  seckill:{<voucher>}:voucher       hash: stock, begin_ms, end_ms (and, for reads,
--                                            initial_stock, title, description)
-- KEYS[2]  seckill:{<voucher>}:buyers        hash: user id -> "p:<token>" (reservation in flight)
--                                                           | "o:<order id>" (ordered)
--                                                           | "u" (unsettled: see below)
-- KEYS[3]  seckill:{<voucher>}:pending       zset: user id of each "p:" record, scored by its expiry (ms)
-- KEYS[4]  seckill:{<voucher>}:lock:<user>   string: the buyer's lock token, with a TTL
-- KEYS[5]  seckill:order-seq                 prefix of the global per-day order sequence;
--                                            the script appends ":<days since 1970>"
-- ARGV[1]  user id (decimal string)
-- ARGV[2]  lock token (uuid)
-- ARGV[3]  reservation and lock TTL in milliseconds
-- ARGV[4]  most reservations in flight (unexpired) at once; past it, "throttled"
--
-- Returns one of:
--   {"admitted", <unix seconds>, <sequence>}  a unit is reserved; the caller builds the
--                                            64-bit order id (Lua numbers are doubles)
--   {"missing"}                              no complete sale state in Redis for this voucher
--   {"not_started"} | {"ended"} | {"sold_out"}
--   {"already_ordered", "<order id>"}
--   {"busy", <lock ms left>}                 the buyer's previous attempt is still in flight
--   {"throttled"}                            ARGV[4] reservations are in flight; nothing taken
--   {"unsettled"}                            no unit left, and the buyer is "u": her expired
--                                            reservation was reclaimed, and her attempt may
--                                            have committed; only MySQL knows
--
-- Invariant kept by every script: each "p:" record holds exactly one unit taken from
-- stock and has an entry in KEYS[3]; "o:" and "u" records hold none and have no entry.

local voucher, buyers, pending, lock = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local user, token, ttl, max_inflight = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

-- Only a complete hash is a sale: a settlement that raced a Redis restart must not pass
-- for one.
local state = redis.call('HMGET', voucher, 'stock', 'begin_ms', 'end_ms')
if not (state[1] and state[2] and state[3]) then
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
if record and string.sub(record, 1, 2) == 'o:' then
  return {'already_ordered', string.sub(record, 3)}
end
if record and string.sub(record, 1, 2) == 'p:' then
  local held = redis.call('PTTL', lock)
  if held > 0 then
    return {'busy', held}
  end
  -- The buyer's previous attempt outlived its lock without settling: this attempt
  -- takes that reservation over, unit included. If the old attempt committed, MySQL
  -- answers this one "already_ordered" and the unit stays with that order.
else
  local expired
  if tonumber(state[1]) <= 0 then
    -- Sold out, unless an abandoned reservation has expired: its unit passes to this buyer.
    expired = redis.call('ZRANGEBYSCORE', pending, '-inf', now, 'LIMIT', 0, 1)[1]
    if not expired then
      if record == 'u' then
        return {'unsettled'}
      end
      return {'sold_out'}
    end
  end
  -- MySQL's connections are finite: past the limit, turn the buyer away before taking
  -- anything, and let her retry shortly.
  if redis.call('ZCOUNT', pending, '(' .. now, '+inf') >= max_inflight then
    return {'throttled'}
  end
  if expired then
    -- Its buyer's attempt may have committed before dying: mark her unsettled, so that
    -- her next attempt asks MySQL instead of hearing "sold_out".
    redis.call('HSET', buyers, expired, 'u')
    redis.call('ZREM', pending, expired)
  else
    redis.call('HINCRBY', voucher, 'stock', -1)
  end
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
