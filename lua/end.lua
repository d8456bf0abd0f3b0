-- end.lua: end a voucher's sale now, by the merchant's word. From now on a new buyer
-- hears "ended"; a buyer with an order still hears it, and purchases already queued are
-- still committed (the group commit does not look at the window).
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: begin_ms, end_ms, "ended" (admission.lua)
-- ARGV     none
--
-- Returns 1 when ended now (or already), 0 when Redis holds no sale for the voucher.

local voucher = KEYS[1]
local window = hash_fields(voucher, {'begin_ms', 'end_ms'})
if not (window.begin_ms and window.end_ms) then
  return 0
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('HSET', voucher, 'begin_ms', math.min(tonumber(window.begin_ms), now),
  'end_ms', math.min(tonumber(window.end_ms), now), 'ended', 1)
return 1
