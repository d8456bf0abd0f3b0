-- view.lua: what a product page shows of a voucher, read from its sale state with the
-- Redis clock, in one round trip whatever the sale's buckets.
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: stock, begin_ms, end_ms, initial_stock,
--                                       title, description, pay_within_s, per_buyer,
--                                       announce_ms
-- KEYS[2]  seckill:{<voucher>}:absent   string: MySQL said no such voucher (a minute)
-- KEYS[3]  seckill:{<slot tag>}:highest-voucher  string: the highest voucher id known to exist
-- KEYS[4]  seckill:{<voucher>}:sweep    string: held by the one request expiring the
--                                       voucher's orders past their deadline
-- KEYS[5]  seckill:{<voucher>}:summary  string: "<stock>,<initial stock>" of the sale's
--                                       other buckets, as a reader last summed them
-- ARGV[1]  voucher_id  the voucher id (a canonical decimal)
-- ARGV[2]  sweep_ms    how long a sweep holds KEYS[4], milliseconds
-- ARGV[3]  audit_ms    how often a read sale is audited, milliseconds (as admission.lua's
--                      presses)
-- ARGV[4]  summary_ms  how long a summary stands before one reader sums the buckets again,
--                      milliseconds
--
-- Returns {stock, begin_ms, end_ms, initial_stock, title, description, pay_within_s,
-- now_ms, sweep, buckets, draw_ms, per_buyer, summary, refresh, audit, announce_ms}, where buckets is
-- the sale's other buckets ("<id>,<id>...", "" for none: docs/design.md, "Buckets"),
-- draw_ms the opening draw's window (0: none), per_buyer the most units a buyer may hold,
-- summary KEYS[5] ("" when none), refresh 1 when this read is the one of summary_ms to sum
-- the other buckets again (and write KEYS[5]), else 0. A sale's audit
-- ("audit_at", which the first read or press sets: due audit_ms after the last) goes to
-- one bucket a read, in turn ("audit_turn"): sweep is 1 when a deadline here has passed
-- ("sweep_at"), or the audit due is this bucket's, and this read took KEYS[4]: it sweeps,
-- as a press would (admission.lua), so that pages read with nobody pressing expire orders
-- and audit MySQL too; else 0; audit is the place (1-based, in buckets) of the other
-- bucket whose audit is due, for the reader to sweep under that bucket's lease, when
-- this read does not sweep (a sweep audits): one bucket's audit a read; else 0. And
-- now_ms is Redis's clock, moved past any boundary of the window the sale has crossed
-- ("begun", "ended": see admission.lua); {"unknown"} when Redis holds no sale and no
-- such voucher exists (as admission.lua decides it), or the voucher is a later bucket of
-- a sale ("sale"): no voucher of its own, or the sale is not listed yet (announce_ms
-- ahead of Redis's clock: a stranger walking ids learns nothing of it); or {} when Redis
-- has no complete state for the
-- voucher, or one marked "stale".

local voucher_id, sweep_ms, audit_ms, summary_ms =
  ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local fields = hash_fields(KEYS[1], {'stock', 'begin_ms', 'end_ms', 'initial_stock', 'title',
  'description', 'stale', 'begun', 'ended', 'pay_within_s', 'sweep_at', 'audit_at', 'buckets',
  'draw_ms', 'per_buyer', 'sale', 'audit_turn', 'summary_at', 'announce_ms'})
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- A later bucket, or a sale not listed yet: as unknown as an id above the highest, and as
-- quickly answered.
if fields.sale or now < tonumber(fields.announce_ms or '0') then
  return {'unknown'}
end
-- A sale found behind MySQL shows MySQL's figures until a sync.
if fields.stale then
  return {}
end
-- A sale is whole with what a page shows.
for _, name in ipairs({'stock', 'begin_ms', 'end_ms', 'initial_stock', 'title',
    'description'}) do
  if not fields[name] then
    if redis.call('EXISTS', KEYS[2]) == 1 then
      return {'unknown'}
    end
    -- Decimal strings compared by length, then by digits: Lua numbers lose ids above 2^53.
    local highest = redis.call('GET', KEYS[3])
    if highest and (#voucher_id > #highest
        or (#voucher_id == #highest and voucher_id > highest)) then
      return {'unknown'}
    end
    return {}
  end
end
local others = fields.buckets or ''
local buckets = others == '' and 1 or select(2, string.gsub(others, ',', ',')) + 2
local audit_at = tonumber(fields.audit_at or '')
local audit_due = audit_at and now >= audit_at
local turn = audit_due and tonumber(fields.audit_turn or '0') % buckets or 0
local sweep = ((fields.sweep_at and now >= tonumber(fields.sweep_at))
    or (audit_due and turn == 0))
  and redis.call('SET', KEYS[4], 1, 'NX', 'PX', sweep_ms) and 1 or 0
-- One bucket's audit a read: a sweep here audits this one.
local audit = 0
if audit_due and turn > 0 and sweep == 0 then
  audit = turn
  redis.call('HSET', KEYS[1], 'audit_turn', turn + 1)
elseif audit_due and sweep == 1 and turn == 0 then
  redis.call('HSET', KEYS[1], 'audit_turn', 1)
end
if sweep == 1 or audit > 0 or not audit_at then
  redis.call('HSET', KEYS[1], 'audit_at', now + audit_ms)
end
local summary, refresh = '', 0
if buckets > 1 then
  summary = redis.call('GET', KEYS[5]) or ''
  if not fields.summary_at or now >= tonumber(fields.summary_at) then
    redis.call('HSET', KEYS[1], 'summary_at', now + summary_ms)
    refresh = 1
  end
end
-- The sale's clock (admission.lua): a boundary crossed stays crossed.
if fields.ended then
  now = math.max(now, tonumber(fields.end_ms))
elseif fields.begun then
  now = math.max(now, tonumber(fields.begin_ms))
end
-- A sale loaded before vouchers had a payment deadline has the default one.
return {fields.stock, fields.begin_ms, fields.end_ms, fields.initial_stock, fields.title,
  fields.description, fields.pay_within_s or 900, now, sweep, others, fields.draw_ms or 0,
  fields.per_buyer or 1, summary, refresh, audit, fields.announce_ms or 0}
