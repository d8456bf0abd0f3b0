-- restock.lua: give the units of cancelled and expired orders back to the live sale,
-- each order's all of them, exactly once, and the units a restock added to the sale
-- (seckill_change_sale). MySQL added them to its stock in the transaction that cancelled
-- or expired the order, or restocked the sale, and wrote an event for each; this applies
-- the events after the
-- last one the sale has applied ("returned_event"), so a reply lost, a request dying
-- halfway, or two requests restocking at once change Redis once per unit. Each buyer's
-- record becomes "c:<order id>" (cancelled) or "x:<order id>" (expired): she holds no
-- order and may not buy again in this sale. A record still "q:" (the order's publication,
-- or that of a purchase of hers MySQL found a duplicate of it, is yet to come) gives back
-- the units its purchase holds beyond the order's, as publish.lua would have. A return applied again (a sold-out
-- publication took its unit after it was given back, and moved the mark back: see
-- publish.lua) finds her record so already, and gives the unit back without counting it
-- again; an order Redis knew (by any record of it, a sync's included) is never counted
-- twice in "orders". A restock's units count in "initial_stock" once: a restock applied
-- again finds its event at or below "restocked_event" (load.lua sets it to the mark, as
-- MySQL's initial stock counts every restock up to it).
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: stock, initial_stock, orders (those Redis
--                                       learnt of, whatever became of them),
--                                       returned_event, restocked_event, sweep_at,
--                                       deadlines, ...
-- KEYS[2]  seckill:{<voucher>}:buyers   hash: user id -> record
-- KEYS[3]  seckill:{<voucher>}:metrics  hash: the voucher's counters ("units:returned",
--                                       "orders:cancelled", "orders:expired",
--                                       "units:restocked")
-- KEYS[4]  seckill:{<voucher>}:sweep    string: held by the request sweeping expiries
-- KEYS[5]  seckill:{<voucher>}:all-out  string: this bucket's buyers hear sold_out without
--                                       trying the sale's other buckets (admission.lua);
--                                       a unit given back clears it
-- ARGV[1]  next_sweep  after a sweep, when the next one is due (unix ms; "" for none: no
--                      order is left unpaid), and the sweep is over; "-" for a restock that
--                      is no sweep
-- ARGV[2]  deadlines   after a sweep, the voucher's "deadlines" when the sweep began
--                      (before it read MySQL): when publications have set deadlines since,
--                      the sweep may not know their orders, so the next sweep is the
--                      earlier of next_sweep and "sweep_at"
-- ARGV[3]  after       the mark the events were read after: when the sale's mark is below
--                      it, a sold-out publication moved it back since (publish.lua), and
--                      the events between are missing here; none is applied (applying the
--                      later ones would move the mark past those), and the next sweep, due
--                      at once, reads them all again
-- ARGV[4]  events      the events, oldest first: a JSON array of {"event": event id,
--                      "kind": "c" (cancelled), "x" (expired) or "r" (restocked), "user":
--                      user id, "order": order id ("" for a restock), "units": the
--                      order's units, or those the restock added here}
--
-- Returns {the number of returns and restocks applied now, the stock after}; -1,
-- changing nothing, when Redis holds no sale for the voucher (a sync rebuilds it from
-- MySQL, returns included).

local voucher, buyers, metrics = KEYS[1], KEYS[2], KEYS[3]
local next_sweep, deadlines, after = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local events = cjson.decode(ARGV[4])
if next_sweep ~= '-' then
  redis.call('DEL', KEYS[4])
end
if redis.call('HEXISTS', voucher, 'stock') == 0 then
  return -1
end
if next_sweep ~= '-' then
  local at = tonumber(next_sweep) or math.huge
  if tonumber(redis.call('HGET', voucher, 'deadlines') or '0') ~= deadlines then
    at = math.min(at, tonumber(redis.call('HGET', voucher, 'sweep_at') or '') or math.huge)
  end
  if at == math.huge then
    redis.call('HDEL', voucher, 'sweep_at')
  else
    redis.call('HSET', voucher, 'sweep_at', at)
  end
end
local mark = tonumber(redis.call('HGET', voucher, 'returned_event') or '0')
if mark < after then
  return {0, redis.call('HGET', voucher, 'stock')}
end
local given, fresh, fresh_units = 0, 0, 0
for _, returned in ipairs(events) do
  local event, kind, user, order_id, units =
    tonumber(returned.event), returned.kind, returned.user, returned.order, returned.units
  if event > mark and kind == 'r' then
    redis.call('HINCRBY', voucher, 'stock', units)
    if event > tonumber(redis.call('HGET', voucher, 'restocked_event') or '0') then
      redis.call('HINCRBY', voucher, 'initial_stock', units)
      redis.call('HSET', voucher, 'restocked_event', event)
      redis.call('HINCRBY', metrics, 'units:restocked', units)
    end
    mark = event
    given = given + 1
  elseif event > mark then
    redis.call('HINCRBY', voucher, 'stock', units)
    local record, returned = redis.call('HGET', buyers, user), kind .. ':' .. order_id
    if record ~= returned then
      -- Redis learns of the order here when neither its publication nor a sync named it.
      local known = kind_of(record)
      if not ((known == ORDERED or known == CANCELLED or known == EXPIRED)
          and named_by(record) == order_id) then
        redis.call('HINCRBY', voucher, 'orders', 1)
      end
      if known == QUEUED then
        -- Her purchase is still queued, and its publication will find her record no
        -- longer so: its units go back now, less those of this order, which MySQL holds
        -- against it (publish.lua's duplicate; none when this order is the purchase's).
        redis.call('HINCRBY', voucher, 'stock', units_of(record) - units)
      end
      redis.call('HSET', buyers, user, returned)
      redis.call('HINCRBY', metrics, kind == 'c' and 'orders:cancelled' or 'orders:expired', 1)
      fresh = fresh + 1
      fresh_units = fresh_units + units
    end
    mark = event
    given = given + 1
  end
end
if given > 0 then
  redis.call('HSET', voucher, 'returned_event', mark)
  clear_all_out(KEYS[5])
end
if fresh > 0 then
  redis.call('HINCRBY', metrics, 'units:returned', fresh_units)
end
return {given, redis.call('HGET', voucher, 'stock')}
