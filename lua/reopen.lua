-- reopen.lua: reopens a bucket of a sale whose other bucket was given units back
-- (core/src/returns.rs), so that its buyers buy them: its all-out mark (records.lua) becomes
-- REOPENED with this moment, and no sighting made before it marks the bucket again, for as
-- long as a mark resting on one could last.
--
-- KEYS[1]  seckill:{<voucher>}:all-out  string: the bucket's mark
-- ARGV[1]  mark_ms  how long a mark lasts after the oldest sighting it rests on, milliseconds
--
-- Returns 1.

local mark = KEYS[1]
local mark_ms = ARGV[1]

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('SET', mark, REOPENED .. now, 'PX', mark_ms)
return 1
