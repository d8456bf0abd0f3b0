-- load.lua: install a voucher's sale terms in Redis: at its creation, and at the end of
-- an admin sync (after stage.lua merged the buyers MySQL holds into KEYS[2]'s hash).
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: stock, begin_ms, end_ms, initial_stock,
--                                       title, description, pay_within_s, per_buyer,
--                                       announce_ms, terms_version, restocked_event,
--                                       sweep_at,
--                                       deadlines, behind and heal_cursor (audit.lua's)
-- KEYS[2]  seckill:{<voucher>}:sync     string: the token of the sync that holds the
--                                       voucher's sync lease
-- KEYS[3]  seckill:{<voucher>}:absent  string: MySQL's word that no such voucher
--                                       existed, which this voucher now disproves
-- KEYS[4]  seckill:{<voucher>}:buyers   hash: expires with the rest
-- KEYS[5]  seckill:{<voucher>}:metrics  hash: expires with the rest
-- KEYS[6]  seckill:{<slot tag>}:highest-voucher  string: the highest voucher id known to exist
-- ARGV[1]  stock           stock left (from MySQL)
-- ARGV[2]  begin_ms        sale begin, unix milliseconds
-- ARGV[3]  end_ms          sale end, unix milliseconds
-- ARGV[4]  initial_stock   initial stock
-- ARGV[5]  title           title
-- ARGV[6]  description     description
-- ARGV[7]  token           the sync's lease token; "" when a creation loads a new voucher
-- ARGV[8]  keep_ms         how long the sale's keys outlive its end, or now when that is
--                          later, milliseconds (see admission.lua)
-- ARGV[9]  highest         the highest voucher id MySQL had handed out when the terms were
--                          read
-- ARGV[10] only_if_ended   1 to install the terms only if Redis holds nothing of the sale
--                          and it has ended by Redis's clock (a press of a sale whose keys
--                          expired long after its end: terms without buyers cannot sell
--                          anything then), else 0
-- ARGV[11] pay_within_s    seconds a winner has to pay
-- ARGV[12] returned_event  the last return event (restock.lua) that stock counts
-- ARGV[13] orders          the voucher's orders in MySQL when stock was read, whatever
--                          became of them
-- ARGV[14] spread          where the sale's stock lives (docs/design.md, "Buckets"): "" all
--                          here; "buckets:<id>,<id>..." the first bucket of a sale, with
--                          the others' ids; "sale:<id>" a later bucket of the sale of that
--                          voucher
-- ARGV[15] draw_ms         the opening draw's window from begin_ms, milliseconds (0: none)
-- ARGV[16] per_buyer       the most units one buyer may hold ("per_buyer")
-- ARGV[17] created         when MySQL created the sale, unix seconds ("created"; 0:
--                          unknown). MySQL hands an id out again once it lost the voucher
--                          that had it: a sync that read the lost sale installs nothing
--                          over the new one's (docs/design.md, "A reused id")
-- ARGV[18] announce_ms     when the sale is listed, unix milliseconds ("announce_ms"; 0:
--                          from its creation): before it view.lua and admission.lua answer
--                          "unknown"
-- ARGV[19] terms_version   the version of these terms (change.lua): a sync that read terms
--                          older than those installed installs nothing
--
-- Buyers and the queue are left as they are: a sync only ever adds what MySQL knows
-- (stage.lua), so nothing a purchase recorded meanwhile is lost. The stock read from
-- MySQL still counts the units of purchases queued and not yet committed: Redis is then
-- too generous by those, which MySQL's verdict of sold_out corrects.
--
-- MySQL's initial stock counts every restock up to returned_event ("restocked_event":
-- restock.lua counts a restock after it in initial_stock, once).
--
-- Returns 1 when loaded (the caller then lists the voucher in seckill:vouchers, and takes
-- it out of seckill:stale and seckill:mysql-behind: sets of their own slots,
-- core/src/sale/listings.rs); 0,
-- changing nothing, when the lease is no longer this sync's (another sync took over, or
-- Redis restarted and lost the pages merged so far), or the sale Redis holds is another
-- one created under the same id, or newer terms are installed, or when only_if_ended asks for an ended
-- sale and it has not ended and Redis holds something of it; 2, changing nothing, when
-- it has not ended and Redis holds nothing of it (lost: the caller lists it in
-- seckill:stale).

local voucher, lease, absent = KEYS[1], KEYS[2], KEYS[3]
local stock, begin_ms, end_ms, initial_stock, title, description =
  ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6]
local token, keep_ms, highest, only_if_ended, pay_within_s, returned_event =
  ARGV[7], tonumber(ARGV[8]), ARGV[9], ARGV[10], ARGV[11], ARGV[12]
local orders, spread, draw_ms, per_buyer, created, announce_ms =
  tonumber(ARGV[13]), ARGV[14], ARGV[15], ARGV[16], ARGV[17], ARGV[18]
local terms_version = tonumber(ARGV[19])

if token ~= '' and redis.call('GET', lease) ~= token then
  return 0
end
-- A sync of a lost sale of the id installs nothing, and its lease goes at once, for the
-- new sale's own sync. A sale created before creations were stamped holds no stamp, or
-- 0: any sync installs it.
local stamp = redis.call('HGET', voucher, 'created')
if token ~= '' and stamp and stamp ~= '0' and stamp ~= created then
  redis.call('DEL', lease)
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- A creation follows clear.lua: a sync of a lost sale of the id that took the lease since
-- may have staged that sale's buyers, none of them this sale's.
if token == '' and only_if_ended == '0' then
  redis.call('DEL', KEYS[4], lease)
end
if only_if_ended == '1' then
  -- Only over nothing: a sale Redis holds, even one marked stale, waits for a sync.
  if redis.call('EXISTS', voucher) == 1 then
    return 0
  end
  -- A live sale Redis holds nothing of was lost (a restart, a failover to an empty
  -- replica): listed stale, so that /health and the metrics name the sync it waits for.
  if now < end_ms then
    return 2
  end
  redis.call('HSET', voucher, 'ended', 1)
end
-- Terms a sync read before a change (or an end, which moves the version on in MySQL)
-- install nothing: the sync is run again. An ended sale's window only ever moves earlier
-- (POST /vouchers/{id}/end): terms read before the end must not open the sale again.
local installed = hash_fields(voucher, {'begin_ms', 'end_ms', 'ended', 'terms_version'})
if token ~= '' and terms_version < tonumber(installed.terms_version or '0') then
  redis.call('DEL', lease)
  return 0
end
if installed.ended and installed.begin_ms and installed.end_ms then
  begin_ms = math.min(begin_ms, tonumber(installed.begin_ms))
  end_ms = math.min(end_ms, tonumber(installed.end_ms))
end
redis.call('HSET', voucher, 'stock', stock, 'begin_ms', begin_ms, 'end_ms', end_ms,
  'initial_stock', initial_stock, 'title', title, 'description', description,
  'pay_within_s', pay_within_s, 'returned_event', returned_event, 'draw_ms', draw_ms,
  'per_buyer', per_buyer, 'created', created, 'announce_ms', announce_ms,
  'terms_version', terms_version, 'restocked_event', returned_event)
local colon = string.find(spread, ':', 1, true)
if colon then
  redis.call('HSET', voucher, string.sub(spread, 1, colon - 1), string.sub(spread, colon + 1))
end
redis.call('DEL', absent)
-- MySQL's orders are recorded (stage.lua): Redis knows at least that many, and a sale
-- found behind MySQL is whole again. More than that, when purchases published during
-- the sync were counted since MySQL was read.
if orders > tonumber(redis.call('HGET', voucher, 'orders') or '0') then
  redis.call('HSET', voucher, 'orders', orders)
end
redis.call('HDEL', voucher, 'stale')
-- Nor is it marked behind MySQL: the first sweep after (due at once, below) audits MySQL
-- afresh, and marks and heals what it still lacks.
redis.call('HDEL', voucher, 'behind', 'heal_cursor')
-- MySQL may hold unpaid orders whose publication Redis lost, and so their deadlines: the
-- first press after a sync or a restoration sweeps, and learns the next one from MySQL.
if token ~= '' or only_if_ended == '1' then
  local sweep_at = tonumber(redis.call('HGET', voucher, 'sweep_at') or '')
  if not sweep_at or sweep_at > now then
    redis.call('HSET', voucher, 'sweep_at', now)
  end
  redis.call('HINCRBY', voucher, 'deadlines', 1)
end
-- Never in the past: a sale loaded after its end keeps its keys as long from now.
local expire_at = math.max(end_ms, now) + keep_ms
for _, key in ipairs({voucher, KEYS[4], KEYS[5]}) do
  redis.call('PEXPIREAT', key, expire_at)
end
-- Decimal strings compared by length, then by digits: Lua numbers lose ids above 2^53.
local current = redis.call('GET', KEYS[6])
if not current or #highest > #current or (#highest == #current and highest > current) then
  redis.call('SET', KEYS[6], highest)
end
if token ~= '' then
  redis.call('DEL', lease)
end
return 1
