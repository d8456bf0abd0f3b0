-- publish.lua: record what MySQL decided for a batch of queued purchases the drainer
-- committed, wake each buyer's waiting request with her outcome, and either hand the
-- next batch back to the drainer or pass the lease on.
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: stock, pay_within_s, sweep_at (the earliest
--                                       payment deadline of an order it published),
--                                       deadlines (publications that set one), ...
-- KEYS[2]  seckill:{<voucher>}:buyers   hash: user id -> "q:<ticket>"
--                                       | "o:<order id>[*<units>]" | "e:<order id>"
--                                       | "c:<order id>" | "x:<order id>"
-- KEYS[3]  seckill:{<voucher>}:queue    list: "<user id>:<ticket>", oldest first (a
--                                       ticket names its units: records.lua)
-- KEYS[4]  seckill:{<voucher>}:lease    string: the drainer's token
-- KEYS[5]  seckill:{<voucher>}:done:    prefix of each queued purchase's outcome list;
--                                       the script appends its entry "<user id>:<ticket>"
-- KEYS[6]  seckill:{<voucher>}:metrics  hash: the voucher's counters; a publication
--                                       counts "commit:<outcome>" per entry, the units
--                                       of those ordered in "units:sold", and its batch
--                                       in "batch:le:<bound>" (bounds 1, 4, 16, 64, 256),
--                                       "batch:count" and "batch:sum"
-- KEYS[7]  seckill:{<voucher>}:all-out  string: this bucket's buyers hear sold_out without
--                                       trying the sale's other buckets (admission.lua);
--                                       a unit given back clears it, as restock.lua does
-- KEYS[8]  seckill:{<voucher>}:drawn    hash: user id -> 1, each entrant the opening draw
--                                       handed a unit who has not pressed since
--                                       (admission.lua): no request of hers waits
-- ARGV[1]  token           the drainer's lease token
-- ARGV[2]  lease_ms        lease lifetime, milliseconds
-- ARGV[3]  handover_ms     the lease's lifetime when handed on, milliseconds: short, so
--                          that a lease handed to a request that has gone lapses soon
-- ARGV[4]  batch_size      most purchases in the next batch
-- ARGV[5]  own             the drainer's own queue entry, or "" when it has none
-- ARGV[6]  mysql_orders    the voucher's orders in MySQL once the batch committed, or ""
--                          when nothing was committed (a waiter handed the lease publishes
--                          its empty batch): no count was read, and none is compared
--                          (below)
-- ARGV[7]  orphans_ms      how long the buyers and counters hashes live when the voucher's
--                          terms are gone (Redis lost them under the drainer) and they have
--                          no expiry of their own, milliseconds: a loss never followed by a
--                          sync leaves nothing for good
-- ARGV[8]  counted_return  the last return (event id) the voucher's stock in MySQL counted
--                          once the batch committed, or "" when nothing was committed
-- ARGV[9]  audit_ms        how long a publication stands for an audit of MySQL's orders,
--                          milliseconds (admission.lua's "audit_at"; below)
-- ARGV[10] published       the entries published, a JSON array of {"entry": queue entry,
--                          "outcome", "order": order id, "units": that order's units},
--                          where outcome is
--   "ordered"    the entry's order is committed (order id: its own)
--   "duplicate"  MySQL holds another order of the buyer (order id: that one); its units
--                stay taken: that order took them in MySQL and Redis never charged them to
--                an "o:" record, else admission would have said already_ordered; so the
--                entry's units go back less that order's
--   "elsewhere"  another bucket of the sale sold the buyer that order (order id): the
--                units go back, and her record "e:<order id>" answers already_ordered
--                here; it is no order of this bucket's
--   "cancelled", "expired"  that order of another bucket is dead: as "elsewhere", but her
--                record is "c:<order id>" or "x:<order id>", which answers
--                order_cancelled or order_expired here
--   "sold_out"   MySQL had no unit for it: Redis stock was ahead of MySQL, so it goes to
--                MySQL's units left (mysql_stock) less those of the purchases still
--                queued after the batch, and the returns after counted_return are applied
--                again (below)
--   "short"      MySQL had units for it, fewer than its own ("units": how many): as
--                "sold_out"
--   "id_taken"   the order id belongs to another order (a sequence lost in a Redis
--                restart): the units go back and the buyer may buy again
-- ARGV[11] mysql_stock     the units MySQL had left once the batch committed, or "" when
--                          nothing was committed
--
-- The voucher hash's "orders" counts the orders the buyers' records have come to name
-- ("o:", and "c:"/"x:" once cancelled or expired; a sync sets it to MySQL's count when
-- that is more), so it is the orders Redis has learnt of, whatever became of them.
-- Once every order of a batch is recorded, MySQL cannot hold more orders than that
-- unless Redis lost some it had recorded: a failover to a lagging replica, a restart from
-- an older snapshot or AOF. The sale is then marked "stale": admission answers "missing"
-- for it, as for a sale Redis lost whole, until an admin's sync (load.lua) loads it again.
--
-- The other way round, MySQL holding fewer orders than Redis learnt of once this batch is
-- recorded means MySQL lost orders it had committed (a failover to a lagging replica):
-- the next sweep is due at once, and its audit heals them (core/src/returns.rs). Each
-- publication of a committed batch is such an audit, so presses do not audit while
-- batches are committed ("audit_at" moved on). A publication with no count (nothing
-- committed) audits nothing and moves nothing on: 0 would read as every order lost.
--
-- A sold_out verdict sets the stock to MySQL's as of the batch's commit, less the units
-- the purchases queued after the batch hold (a unit the batch's later entries did not take
-- is then counted there, and none comes back). A return
-- that committed after the batch (a cancellation or an expiry between the commit and this
-- publication) may already have given its unit back here, and zeroing would take it
-- again for good: the sale's mark ("returned_event") goes back to counted_return, and the
-- next sweep ("sweep_at" 0, due at once; "deadlines" counted, so that a sweep running now
-- keeps it due) applies those returns again. restock.lua then adds their units without
-- counting their orders twice.
--
-- The entries must be the head of the queue, in order: a drainer whose lease lapsed and
-- whose batch someone else already published changes nothing but the buyers' "o:"
-- records of the orders MySQL holds, where the record is still the purchase's "q:" or
-- gone (so that a buyer told 201 by a drainer whose publication came after a Redis
-- restart and the admin's sync is not told sold_out later), never over what came since
-- (a heal's "l:", another order of hers), nor for a purchase admitted before this sale
-- of the id was created ("created": a lost sale's); a record it turns from "q:" gives
-- back what MySQL did not take of its purchase's units (a duplicate's), as the batch's
-- publication, which then finds it no longer queued, would have. Each buyer's waiting request finds
-- {"outcome": <outcome>, "order": "<order id>", "units": <its units>} (JSON) in her
-- outcome list (60 s to collect it), except the drainer's
-- own.
--
-- Returns {"lost"} when the lease is not the drainer's or the entries are not the head
-- of the queue; {"done"} when the drainer's own entry is published (or it has none): the
-- lease then goes to the oldest queued purchase, whose request finds "lead" in its
-- outcome list (the lease's token is then that entry), or is deleted when the queue is
-- empty or its oldest purchase is one the draw queued for an entrant who has not pressed
-- since (no request waits to take it: the next press's admission takes the lease at
-- once, so that a draw's batches follow each other at the pace of the presses); otherwise {"next", batch...}, the next batch, with the lease extended. Either
-- of the last two starts with "stale" when this publication found the sale behind MySQL.
-- The outcome ("lost", "done", "next") is followed by the voucher's stock after the
-- script (nil when Redis holds no sale): a drainer that was to hear sold_out presses
-- again when it fits her (core/src/purchase/).

local voucher, buyers, queue, lease, done, metrics =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
-- mysql_orders, counted_return and mysql_stock are nil when nothing was committed: no
-- count of MySQL's to compare.
local token, lease_ms, handover_ms, batch_size, own =
  ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local mysql_orders, orphans_ms, counted_return, audit_ms =
  tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])
local published, mysql_stock = cjson.decode(ARGV[10]), tonumber(ARGV[11])
local n = #published
-- Redis may have lost the sale under a drainer (a restart): a publication never creates
-- the voucher hash, which admission would take for a sale.
local loaded = redis.call('EXISTS', voucher) == 1
-- The earliest payment deadline among the orders this publication records: the first
-- press after it sweeps (admission.lua).
local pay_within_ms = tonumber(redis.call('HGET', voucher, 'pay_within_s') or '900') * 1000
local sweep_at = tonumber(redis.call('HGET', voucher, 'sweep_at') or '') or math.huge
local swept_from = sweep_at
local dated = false
local wiped = false

local function bound_orphans()
  if not loaded then
    for _, key in ipairs({buyers, metrics}) do
      if redis.call('PTTL', key) == -1 then
        redis.call('PEXPIRE', key, orphans_ms)
      end
    end
  end
end

-- Records the buyer's order of `units`, counting it when Redis did not know it yet. An
-- order that was cancelled or expired before its publication (restock.lua recorded it so,
-- and gave its units back) stays so.
local function record_order(user, order_id, units)
  local record = redis.call('HGET', buyers, user)
  local kind = kind_of(record)
  if not ((kind == ORDERED or kind == CANCELLED or kind == EXPIRED)
      and named_by(record) == order_id) then
    redis.call('HSET', buyers, user, with_units(ORDERED .. order_id, units))
    if loaded then
      redis.call('HINCRBY', voucher, 'orders', 1)
    end
  end
end

-- The buyer and the ticket of a queue entry.
local function split(entry)
  local colon = string.find(entry, ':', 1, true)
  return string.sub(entry, 1, colon - 1), string.sub(entry, colon + 1)
end

-- Whether the purchase still holds its units: its record is "q:<ticket>". Whoever
-- rewrites that record first (the publication of its batch, a lapsed drainer's below,
-- restock.lua) gives back what MySQL did not take of them, so they go back once; a sync
-- rewrites it with Redis's stock set to MySQL's, which holds none of them.
local function holds(user, ticket)
  return redis.call('HGET', buyers, user) == QUEUED .. ticket
end

-- The units a purchase of `units` holds that MySQL did not take for it, by its verdict:
-- none for its order; for a duplicate, all but the order held (MySQL took those, and
-- Redis never charged them); else all.
local function unused(item, units)
  if item.outcome == 'ordered' or item.outcome == 'duplicate' then
    return units - item.units
  end
  return units
end

local function lost()
  local created = tonumber(redis.call('HGET', voucher, 'created') or '') or 0
  for _, item in ipairs(published) do
    local user, ticket = split(item.entry)
    -- A purchase admitted before this sale of the id was created is a lost sale's (MySQL
    -- refuses its id here): none of this sale's business.
    local admitted_s = tonumber(string.sub(ticket, 1, string.find(ticket, ':', 1, true) - 1))
    if (item.outcome == 'ordered' or item.outcome == 'duplicate') and admitted_s >= created then
      local held = holds(user, ticket)
      -- Whatever came since (a heal naming the order lost, another order of hers) is newer
      -- than what this drainer knows: it records only over the purchase it committed.
      if held or not redis.call('HGET', buyers, user) then
        record_order(user, item.order, item.units)
      end
      if held then
        give_back(voucher, KEYS[7], unused(item, units_of(ticket)))
      end
    end
  end
  bound_orphans()
  return {'lost', redis.call('HGET', voucher, 'stock')}
end

if redis.call('GET', lease) ~= token then
  return lost()
end
if n > 0 then
  local head = redis.call('LRANGE', queue, 0, n - 1)
  for i = 1, n do
    if head[i] ~= published[i].entry then
      return lost()
    end
  end
end

-- The record of a buyer whose order of the sale is another bucket's, by its outcome.
local another = {elsewhere = ELSEWHERE, cancelled = CANCELLED, expired = EXPIRED}
for _, item in ipairs(published) do
  local entry, outcome, order_id = item.entry, item.outcome, item.order
  local user, ticket = split(entry)
  local queued = holds(user, ticket)
  local units = units_of(ticket)
  if outcome == 'ordered' or outcome == 'duplicate' then
    record_order(user, order_id, item.units)
    if outcome == 'ordered' then
      redis.call('HINCRBY', metrics, 'units:sold', units)
      -- Its deadline, by its admission's second: MySQL's, from its commit, is no earlier.
      local admitted_s = tonumber(string.sub(ticket, 1, string.find(ticket, ':', 1, true) - 1))
      sweep_at = math.min(sweep_at, admitted_s * 1000 + pay_within_ms)
      dated = true
    end
  elseif another[outcome] and queued then
    redis.call('HSET', buyers, user, another[outcome] .. order_id)
  elseif queued then
    redis.call('HDEL', buyers, user)
  end
  local short = outcome == 'sold_out' or outcome == 'short'
  if loaded and short and not wiped then
    local after = 0
    for _, later in ipairs(redis.call('LRANGE', queue, n, -1)) do
      after = after + units_of(later)
    end
    redis.call('HSET', voucher, 'stock', math.max(0, mysql_stock - after))
    wiped = true
  elseif queued and not wiped and not short then
    -- After a sold_out of the batch, MySQL's units left count them already: none comes
    -- back.
    give_back(voucher, KEYS[7], unused(item, units))
  end
  if entry ~= own then
    redis.call('RPUSH', done .. entry,
      cjson.encode({outcome = outcome, order = order_id, units = item.units}))
    redis.call('PEXPIRE', done .. entry, 60000)
  end
  redis.call('HINCRBY', metrics, 'commit:' .. outcome, 1)
end
redis.call('LTRIM', queue, n, -1)
if wiped and counted_return
    and tonumber(redis.call('HGET', voucher, 'returned_event') or '0') > counted_return then
  redis.call('HSET', voucher, 'returned_event', counted_return)
  sweep_at = 0
  dated = true
end
if loaded and mysql_orders then
  local time = redis.call('TIME')
  redis.call('HSET', voucher, 'audit_at',
    tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) + audit_ms)
  if mysql_orders < tonumber(redis.call('HGET', voucher, 'orders') or '0') then
    sweep_at = 0
    dated = true
  end
end
if loaded and dated then
  if sweep_at < swept_from then
    redis.call('HSET', voucher, 'sweep_at', sweep_at)
  end
  -- A sweep that read MySQL before these orders were committed must not drop their
  -- deadlines (restock.lua).
  redis.call('HINCRBY', voucher, 'deadlines', 1)
end
-- Named in the reply, so that the caller lists the voucher in seckill:stale (a set of
-- its own slot, core/src/sale/listings.rs).
local stale = loaded and mysql_orders
  and mysql_orders > tonumber(redis.call('HGET', voucher, 'orders') or '0')
if stale then
  redis.call('HSET', voucher, 'stale', 1)
end
if n > 0 then
  for _, bound in ipairs({1, 4, 16, 64, 256}) do
    if n <= bound then
      redis.call('HINCRBY', metrics, 'batch:le:' .. bound, 1)
    end
  end
  redis.call('HINCRBY', metrics, 'batch:count', 1)
  redis.call('HINCRBY', metrics, 'batch:sum', n)
end
bound_orphans()

-- The drainer's own purchase is still to publish while her record says so, or while
-- her entry is the head (a sync may have recorded her order before its publication):
-- handing the lease on would hand it back to her own request.
local head = redis.call('LINDEX', queue, 0)
local own_queued = false
if own ~= '' then
  own_queued = head == own or holds(split(own))
end
if own_queued then
  redis.call('PEXPIRE', lease, lease_ms)
  local answer = redis.call('LRANGE', queue, 0, batch_size - 1)
  table.insert(answer, 1, redis.call('HGET', voucher, 'stock'))
  table.insert(answer, 1, 'next')
  if stale then
    table.insert(answer, 1, 'stale')
  end
  return answer
end

local unwaited = head
  and redis.call('HEXISTS', KEYS[8], (split(head))) == 1
if head and not unwaited then
  redis.call('SET', lease, head, 'PX', handover_ms)
  redis.call('RPUSH', done .. head, 'lead')
  redis.call('PEXPIRE', done .. head, 60000)
else
  redis.call('DEL', lease)
end
if stale then
  return {'stale', 'done', redis.call('HGET', voucher, 'stock')}
end
return {'done', redis.call('HGET', voucher, 'stock')}
