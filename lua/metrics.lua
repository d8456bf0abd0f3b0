-- metrics.lua: one voucher's figures for GET /metrics, read at one instant.
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: stock, initial_stock, ...
-- KEYS[2]  seckill:{<voucher>}:queue    list: the purchases waiting for the group commit
-- KEYS[3]  seckill:{<voucher>}:metrics  hash: counter name -> count (admission.lua,
--                                       publish.lua, stage.lua and the handler write it)
-- KEYS[4]  seckill:{<voucher>}:entrants:1  sorted set: the sale's line of those asking for
--                                       1 unit (docs/design.md, "The line")
-- KEYS[5]  seckill:{<voucher>}:entrants:2  the line of those asking for 2 units
-- KEYS[6]  seckill:{<voucher>}:entrants:3  the line of those asking for 3 units
-- KEYS[7]  seckill:{<voucher>}:entrants:4  the line of those asking for 4 units
-- KEYS[8]  seckill:{<voucher>}:entrants:5  the line of those asking for 5 units
-- KEYS[9]  seckill:{<voucher>}:entrants:6  the line of those asking for 6 units
-- KEYS[10] seckill:{<voucher>}:entrants:7  the line of those asking for 7 units
-- KEYS[11] seckill:{<voucher>}:entrants:8  the line of those asking for 8 units
-- KEYS[12] seckill:{<voucher>}:entrants:9  the line of those asking for 9 units
-- KEYS[13] seckill:{<voucher>}:entrants:10  the line of those asking for 10 units
-- ARGV[1]  reported_ms  how long after its end a sale is still reported, milliseconds
--
-- Returns {} when Redis holds no sale for the voucher, or one that ended longer ago than
-- that (the caller then stops reporting it); else {stock, initial stock, queue length,
-- orders Redis recorded, 1 when the sale is stale else 0, the orders MySQL lacks (audit.lua),
-- how many wait in the sale's line, counter name, count, ...}.

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
  tonumber(state.behind or '0'), 0}
for line = 4, 13 do
  answer[7] = answer[7] + redis.call('ZCARD', KEYS[line])
end
local counters = redis.call('HGETALL', KEYS[3])
for i = 1, #counters do
  answer[#answer + 1] = counters[i]
end
return answer
