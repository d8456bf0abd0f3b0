-- stage.lua: merge a page of the buyers a sync read from MySQL into the voucher's buyers,
-- while the sync still holds the voucher's sync lease, and extend the lease. MySQL's
-- order is the truth: it replaces whatever Redis had for the buyer. A purchase of hers
-- still queued stays in the queue; its commit finds her order and publishes it.
--
-- KEYS[1]  seckill:{<voucher>}:buyers   hash: user id -> "q:<ticket>" | "o:<order id>[*<units>]"
--                                       | "c:<order id>" | "x:<order id>"
-- KEYS[2]  seckill:{<voucher>}:sync     string: the lease holder's token
-- KEYS[3]  seckill:{<voucher>}:voucher  hash: its "orders" counts each order a record comes
--                                       to name, as publish.lua does (while the hash
--                                       exists: after a total loss, load.lua sets it)
-- ARGV[1]  token       the sync's lease token
-- ARGV[2]  lease_ms    lease lifetime from now, milliseconds
-- ARGV[3]  orphans_ms  how long the buyers hash lives when it has no expiry of its own,
--                      milliseconds: load.lua sets the sale's; a sync that dies before it
--                      leaves nothing for good
-- ARGV[4]  page        the page: a JSON array of {"user": user id, "record":
--                      "o:<order id>[*<units>]", or "c:"/"x:" for an order cancelled or
--                      expired}
-- ARGV[5]  created     when MySQL created the sale the page is of, unix seconds (load.lua's
--                      created)
--
-- Returns 1 when merged; 0, changing nothing, when the lease is no longer this sync's, or
-- the sale Redis holds is another one created under the same id (load.lua).

local buyers, lease, voucher = KEYS[1], KEYS[2], KEYS[3]
local token, lease_ms, orphans_ms, page, created =
  ARGV[1], ARGV[2], ARGV[3], cjson.decode(ARGV[4]), ARGV[5]

if redis.call('GET', lease) ~= token then
  return 0
end
-- Of another sale than the one Redis holds under the id: load.lua.
local stamp = redis.call('HGET', voucher, 'created')
if stamp and stamp ~= '0' and stamp ~= created then
  redis.call('DEL', lease)
  return 0
end
local loaded = redis.call('EXISTS', voucher) == 1
for _, buyer in ipairs(page) do
  local before = redis.call('HGET', buyers, buyer.user)
  if before ~= buyer.record then
    redis.call('HSET', buyers, buyer.user, buyer.record)
    -- A new order for Redis, unless the record named it already (paid or not, cancelled).
    local named = before and kind_of(before) ~= QUEUED
      and named_by(before) == named_by(buyer.record)
    if loaded and not named then
      redis.call('HINCRBY', voucher, 'orders', 1)
    end
  end
end
redis.call('PEXPIRE', lease, lease_ms)
if redis.call('PTTL', buyers) == -1 then
  redis.call('PEXPIRE', buyers, orphans_ms)
end
return 1
