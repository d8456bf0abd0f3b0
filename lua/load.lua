-- load.lua: install a voucher's sale terms in Redis: at its creation, and at the end of
-- an admin sync (after stage.lua merged the buyers MySQL holds into KEYS[2]'s hash).
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: stock, begin_ms, end_ms, initial_stock,
--                                       title, description, pay_within_s, sweep_at,
--                                       deadlines
-- KEYS[2]  seckill:{<voucher>}:sync     string: the token of the sync that holds the
--                                       voucher's sync lease
-- KEYS[3]  seckill:{<voucher>}:absent  string: MySQL's word that no such voucher
--                                       existed, which this voucher now disproves
-- KEYS[4]  seckill:vouchers             set: the ids of the vouchers Redis holds a sale
--                                       for, which GET /metrics reports on (outside the
--                                       voucher's hash slot, like the order sequence)
-- KEYS[5]  seckill:stale                set: vouchers whose sale state is behind MySQL,
--                                       or lost
-- KEYS[6]  seckill:{<voucher>}:buyers   hash: expires with the rest
-- KEYS[7]  seckill:{<voucher>}:metrics  hash: expires with the rest
-- KEYS[8]  seckill:highest-voucher      string: the highest voucher id known to exist
-- ARGV[1]  stock left (from MySQL)
-- ARGV[2]  sale begin, unix milliseconds
-- ARGV[3]  sale end, unix milliseconds
-- ARGV[4]  initial stock
-- ARGV[5]  title
-- ARGV[6]  description
-- ARGV[7]  the sync's lease token; "" when a creation loads a new voucher
-- ARGV[8]  the voucher id
-- ARGV[9]  how long the sale's keys outlive its end, or now when that is later,
--          milliseconds (see admission.lua)
-- ARGV[10] the highest voucher id MySQL had handed out when the terms were read
-- ARGV[11] 1 to install the terms only if Redis holds nothing of the sale and it has
--          ended by Redis's clock (a press of a sale whose keys expired long after its
--          end: terms without buyers cannot sell anything then), else 0
-- ARGV[12] seconds a winner has to pay
-- ARGV[13] the last return event (restock.lua) that the stock ARGV[1] counts
-- ARGV[14] the voucher's orders in MySQL when the stock ARGV[1] was read, whatever became
--          of them
--
-- Buyers and the queue are left as they are: a sync only ever adds what MySQL knows
-- (stage.lua), so nothing a purchase recorded meanwhile is lost. The stock read from
-- MySQL still counts the units of purchases queued and not yet committed: Redis is then
-- too generous by those, which MySQL's verdict of sold_out corrects.
--
-- Returns 1 when loaded; 0, changing nothing, when the lease is no longer this sync's
-- (another sync took over, or Redis restarted and lost the pages merged so far), or when
-- ARGV[11] asks for an ended sale and it has not ended (a sale Redis holds nothing of
-- is then added to KEYS[5], and nothing else changes).

local voucher, lease, absent, token = KEYS[1], KEYS[2], KEYS[3], ARGV[7]

if token ~= '' and redis.call('GET', lease) ~= token then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if ARGV[11] == '1' then
  -- Only over nothing: a sale Redis holds, even one marked stale, waits for a sync.
  if redis.call('EXISTS', voucher) == 1 then
    return 0
  end
  -- A live sale Redis holds nothing of was lost (a restart, a failover to an empty
  -- replica): marked stale, so that /health and the metrics name the sync it waits for.
  if now < tonumber(ARGV[3]) then
    redis.call('SADD', KEYS[5], ARGV[8])
    return 0
  end
  redis.call('HSET', voucher, 'ended', 1)
end
-- A window only ever moves earlier (POST /vouchers/{id}/end): terms a sync read before
-- such a move must not open the sale again.
local window = redis.call('HMGET', voucher, 'begin_ms', 'end_ms')
local begin_ms, end_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
if window[1] and window[2] then
  begin_ms = math.min(begin_ms, tonumber(window[1]))
  end_ms = math.min(end_ms, tonumber(window[2]))
end
redis.call('HSET', voucher, 'stock', ARGV[1], 'begin_ms', begin_ms, 'end_ms', end_ms,
  'initial_stock', ARGV[4], 'title', ARGV[5], 'description', ARGV[6], 'pay_within_s', ARGV[12],
  'returned_event', ARGV[13])
redis.call('DEL', absent)
redis.call('SADD', KEYS[4], ARGV[8])
-- MySQL's orders are recorded (stage.lua): Redis knows at least that many, and a sale
-- found behind MySQL is whole again. More than that, when purchases published during
-- the sync were counted since MySQL was read.
local orders = tonumber(ARGV[14])
if orders > tonumber(redis.call('HGET', voucher, 'orders') or '0') then
  redis.call('HSET', voucher, 'orders', orders)
end
redis.call('HDEL', voucher, 'stale')
-- MySQL may hold unpaid orders whose publication Redis lost, and so their deadlines: the
-- first press after a sync or a restoration sweeps, and learns the next one from MySQL.
if token ~= '' or ARGV[11] == '1' then
  local sweep_at = tonumber(redis.call('HGET', voucher, 'sweep_at') or '')
  if not sweep_at or sweep_at > now then
    redis.call('HSET', voucher, 'sweep_at', now)
  end
  redis.call('HINCRBY', voucher, 'deadlines', 1)
end
-- Never in the past: a sale loaded after its end keeps its keys as long from now.
local expire_at = math.max(end_ms, now) + tonumber(ARGV[9])
for _, key in ipairs({voucher, KEYS[6], KEYS[7]}) do
  redis.call('PEXPIREAT', key, expire_at)
end
redis.call('SREM', KEYS[5], ARGV[8])
-- Decimal strings compared by length, then by digits: Lua numbers lose ids above 2^53.
local highest = redis.call('GET', KEYS[8])
if not highest or #ARGV[10] > #highest or (#ARGV[10] == #highest and ARGV[10] > highest) then
  redis.call('SET', KEYS[8], ARGV[10])
end
if token ~= '' then
  redis.call('DEL', lease)
end
return 1
