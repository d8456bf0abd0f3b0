-- heal.lua: page through the orders Redis holds for a voucher's buyers, so that those
-- MySQL lost are committed again (core/src/returns.rs), and record what MySQL said of the
-- last page.
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: stock, orders (those Redis learnt of),
--                                       sweep_at, deadlines, pay_within_s, heal_cursor
--                                       (where the last heal stopped, while MySQL lacks
--                                       orders: a sweep heals a few pages at most)
-- KEYS[2]  seckill:{<voucher>}:buyers   hash: user id -> record ("o:<order id>[*<units>]",
--                                       ...)
-- KEYS[3]  seckill:{<voucher>}:metrics  hash: "orders:restored", "orders:unrecoverable"
-- KEYS[4]  seckill:{<voucher>}:all-out  string: this bucket's buyers hear sold_out without
--                                       trying the sale's other buckets (admission.lua);
--                                       a unit given back clears it, as restock.lua does
-- ARGV[1]  cursor     the cursor to scan on from, "start" for where the last heal stopped
--                     (or the start), or "" to scan nothing
-- ARGV[2]  page_size  how many records a page scans (HSCAN's COUNT)
-- ARGV[3]  restored   the orders MySQL created again for the last page
-- ARGV[4]  unhealed   the last page's orders MySQL does not hold as Redis does: a JSON
--                     array of {"user": user id, "order": her order id, "verdict": MySQL's
--                     verdict on committing it again, "about": the order that verdict is
--                     about, "units": that order's units}, as publish.lua takes them:
--   "duplicate"  MySQL holds another order of hers in this bucket: it wins, and her
--                record names it; the stock moves by the units hers held less that
--                order's (which MySQL took and Redis never charged)
--   "elsewhere", "cancelled", "expired"  her order of the sale is another bucket's
--                (alive, cancelled, expired): her record becomes "e:"/"c:"/"x:" with its
--                id, as a publication records it; hers leaves "orders", and its units
--                (which MySQL holds here) go back
--   "sold_out", "id_taken"  MySQL could not commit hers again (no unit left, or its id is
--                another order's): her record becomes "l:<order id>" (lost), the order
--                leaves "orders", and she may buy again; after "id_taken" its units (which
--                MySQL holds: the order with her id took its own) go back, as publish.lua
--                gives a purchase's back
--
-- A record changes only while it still names the order the page read, so two heals at
-- once count each change once. Returns {next cursor ("0": the scan is over), user id,
-- order id, units, ...}: the page's committed orders ("o:" records).

local voucher, buyers, metrics = KEYS[1], KEYS[2], KEYS[3]
local cursor, page_size, restored = ARGV[1], ARGV[2], tonumber(ARGV[3])
local unhealed = cjson.decode(ARGV[4])
if restored > 0 then
  redis.call('HINCRBY', metrics, 'orders:restored', restored)
  -- Their deadlines count from their new commit: the next sweep is due by then (a second
  -- early, as MySQL's clock may lead), and "deadlines" counted so that a sweep running
  -- now keeps it (restock.lua).
  local time = redis.call('TIME')
  local due = tonumber(time[1]) * 1000 - 1000
    + tonumber(redis.call('HGET', voucher, 'pay_within_s') or '900') * 1000
  local sweep_at = tonumber(redis.call('HGET', voucher, 'sweep_at') or '')
  if not sweep_at or due < sweep_at then
    redis.call('HSET', voucher, 'sweep_at', due)
  end
  redis.call('HINCRBY', voucher, 'deadlines', 1)
end
-- The record of a buyer whose order of the sale is another bucket's, by the verdict.
local another = {elsewhere = ELSEWHERE, cancelled = CANCELLED, expired = EXPIRED}
for _, lost in ipairs(unhealed) do
  local user, order_id, verdict, about = lost.user, lost.order, lost.verdict, lost.about
  local record = redis.call('HGET', buyers, user)
  if kind_of(record) == ORDERED and named_by(record) == order_id then
    local units = units_of(record)
    if verdict == 'duplicate' then
      redis.call('HSET', buyers, user, with_units(ORDERED .. about, lost.units))
      give_back(voucher, KEYS[4], units - lost.units)
    elseif another[verdict] then
      redis.call('HSET', buyers, user, another[verdict] .. about)
      redis.call('HINCRBY', voucher, 'orders', -1)
      give_back(voucher, KEYS[4], units)
    else
      redis.call('HSET', buyers, user, LOST .. order_id)
      redis.call('HINCRBY', voucher, 'orders', -1)
      redis.call('HINCRBY', metrics, 'orders:unrecoverable', 1)
      if verdict == 'id_taken' then
        give_back(voucher, KEYS[4], units)
      end
    end
  end
end
if cursor == '' then
  return {'0'}
end
if cursor == 'start' then
  cursor = redis.call('HGET', voucher, 'heal_cursor') or '0'
end
local scan = redis.call('HSCAN', buyers, cursor, 'COUNT', page_size)
if scan[1] == '0' then
  redis.call('HDEL', voucher, 'heal_cursor')
else
  redis.call('HSET', voucher, 'heal_cursor', scan[1])
end
local answer = {scan[1]}
local records = scan[2]
for i = 1, #records, 2 do
  if kind_of(records[i + 1]) == ORDERED then
    answer[#answer + 1] = records[i]
    answer[#answer + 1] = named_by(records[i + 1])
    answer[#answer + 1] = units_of(records[i + 1])
  end
end
return answer
