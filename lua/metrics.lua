-- metrics.lua: one voucher's figures for GET /metrics, read at one instant.
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: stock, initial_stock, ...
-- KEYS[2]  seckill:{<voucher>}:queue    list: the purchases waiting for the group commit
-- KEYS[3]  seckill:{<voucher>}:metrics  hash: counter name -> count (admission.lua,
--                                       publish.lua, stage.lua and the handler write it)
-- ARGV[1]  reported_ms  how long after its end a sale is still reported, milliseconds
--
-- Returns {} when Redis holds no sale for the voucher, or one that ended longer ago than
-- that (the caller then stops reporting it); else {stock, initial stock, queue length,
-- orders Redis recorded, 1 when the sale is stale else 0, the orders MySQL lacks (audit.lua),
-- counter name, count, ...}.

local reported_ms = tonumber(ARGV[1])

local state = hash_fields(KEYS[1], {'stock', 'initial_stock', 'end_ms', 'orders', 'stale',
  'behind'})
if not (state.stock and state.initial_stock and state.end_ms) then
  return {}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if now > tonumber(state.end_ms) + reported_ms then
  return {}
end
local answer = {tonumber(state.stock), tonumber(state.initial_stock),
  redis.call('LLEN', KEYS[2]), tonumber(state.orders or '0'), state.stale and 1 or 0,
  tonumber(state.behind or '0')}
local counters = redis.call('HGETALL', KEYS[3])
for i = 1, #counters do
  answer[#answer + 1] = counters[i]
end
return answer
