-- seckill-bench's wrk script: counts each response's outcome and, when wrk is done,
-- prints one line "seckill-bench <json>" with the throughput inputs, the latency
-- percentiles and the outcome counts, for seckill-bench to read.
--
-- Arguments (after `--`): the HTTP method. Headers (the buyer's token) come from -H.
-- seckill-bench appends tokens.lua to this file when every request needs another buyer.

local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  wrk.method = args[1]
  counts = {}
  if init_tokens then
    init_tokens(args)
  end
end

-- 409s (sold out, already ordered) and 429s (busy, throttled): the body's error code tells them apart.
function response(status, headers, body)
  local outcome = tostring(status)
  if status == 409 or status == 429 then
    outcome = string.match(body, '"error":"([a-z_]+)"') or outcome
  end
  counts[outcome] = (counts[outcome] or 0) + 1
end

function done(summary, latency, requests)
  local totals, outcomes = {}, {}
  for _, thread in ipairs(threads) do
    for outcome, n in pairs(thread:get("counts")) do
      totals[outcome] = (totals[outcome] or 0) + n
    end
  end
  for outcome, n in pairs(totals) do
    outcomes[#outcomes + 1] = string.format('"%s":%d', outcome, n)
  end
  local errors = summary.errors
  io.write(string.format(
    'seckill-bench {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d,' ..
    '"socket_errors":%d,"outcomes":{%s}}\n',
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max,
    errors.connect + errors.read + errors.write + errors.timeout,
    table.concat(outcomes, ",")))
end
