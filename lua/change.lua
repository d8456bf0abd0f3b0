-- change.lua: install a sale's changed terms in one bucket, once MySQL holds them
-- (seckill_change_sale; docs/design.md, "Changing a sale"). Terms carry a version, which
-- every change and every end moves on in MySQL: terms older than those installed install
-- nothing, so that a change whose reply was slow never undoes a later one. A sale that
-- ended ("ended": by the merchant's word or its end passing) keeps its window, which only
-- moves earlier, as load.lua keeps it. A sale that has not begun by Redis's clock
-- ("begun" unset, its begin ahead) takes every term, and when it holds no order its units
-- and the mark they count (as load.lua installs them: a restock MySQL counted is not
-- applied again); one that has begun takes only its title, description and end (MySQL
-- refused the rest once it opened: a clock of Redis's that is ahead of MySQL's by more
-- than the change's guard leaves its begin, and the audit of the next sweep, due at once
-- when its units differ, sets its stock to MySQL's). Units reach an open sale only as
-- restocks (restock.lua), never here.
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: the sale's terms, terms_version, begun,
--                                       ended, orders, initial_stock, returned_event,
--                                       restocked_event, sweep_at, deadlines
-- KEYS[2]  seckill:{<voucher>}:queue    list: purchases queued (none before the sale
--                                       begins)
-- KEYS[3]  seckill:{<voucher>}:buyers   hash: expires with the rest
-- KEYS[4]  seckill:{<voucher>}:metrics  hash: expires with the rest
-- ARGV[1]  terms_version  the version of these terms
-- ARGV[2]  title          title
-- ARGV[3]  description    description
-- ARGV[4]  begin_ms       sale begin, unix milliseconds
-- ARGV[5]  end_ms         sale end, unix milliseconds
-- ARGV[6]  pay_within_s   seconds a winner has to pay
-- ARGV[7]  draw_ms        the opening draw's window (0: none)
-- ARGV[8]  per_buyer      the most units one buyer may hold
-- ARGV[9]  announce_ms    when the sale is listed (0: from its creation)
-- ARGV[10] stock          this bucket's units left, as MySQL holds them
-- ARGV[11] initial_stock  this bucket's units ever offered, as MySQL holds them
-- ARGV[12] returned_event the last return or restock (event id) those units count
-- ARGV[13] keep_ms        how long the sale's keys outlive its end, milliseconds
--
-- Returns 1 when installed; 0, changing nothing, when newer terms are installed; -1 when
-- Redis holds no sale for the voucher (a sync installs MySQL's terms, these included).

local voucher, queue = KEYS[1], KEYS[2]
local terms_version, title, description = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local begin_ms, end_ms, pay_within_s, draw_ms, per_buyer, announce_ms =
  tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local stock, initial_stock, returned_event, keep_ms =
  ARGV[10], ARGV[11], ARGV[12], tonumber(ARGV[13])

local state = hash_fields(voucher, {'stock', 'begin_ms', 'end_ms', 'begun', 'ended',
  'orders', 'terms_version', 'initial_stock'})
if not (state.stock and state.begin_ms and state.end_ms) then
  return -1
end
if terms_version < tonumber(state.terms_version or '0') then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('HSET', voucher, 'title', title, 'description', description,
  'terms_version', terms_version)
if state.ended then
  begin_ms = math.min(begin_ms, tonumber(state.begin_ms))
  end_ms = math.min(end_ms, tonumber(state.end_ms))
elseif state.begun or now >= tonumber(state.begin_ms) then
  begin_ms = tonumber(state.begin_ms)
  if state.initial_stock ~= initial_stock then
    redis.call('HSET', voucher, 'sweep_at', now)
    redis.call('HINCRBY', voucher, 'deadlines', 1)
  end
else
  redis.call('HSET', voucher, 'pay_within_s', pay_within_s, 'draw_ms', draw_ms,
    'per_buyer', per_buyer, 'announce_ms', announce_ms)
  if tonumber(state.orders or '0') == 0 and redis.call('LLEN', queue) == 0 then
    redis.call('HSET', voucher, 'stock', stock, 'initial_stock', initial_stock,
      'returned_event', returned_event, 'restocked_event', returned_event)
  end
end
redis.call('HSET', voucher, 'begin_ms', begin_ms, 'end_ms', end_ms)
local expire_at = math.max(end_ms, now) + keep_ms
for _, key in ipairs({voucher, KEYS[3], KEYS[4]}) do
  redis.call('PEXPIREAT', key, expire_at)
end
return 1
