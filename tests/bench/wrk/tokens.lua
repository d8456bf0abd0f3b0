
-- Appended to outcomes.lua for the purchase path: every request is a different buyer.
-- Arguments: the method, the token file (one buyer's JWT a line) and the number of wrk
-- threads; thread i takes lines i, i + threads, ..., so no two threads share a buyer.
-- A thread that runs out of buyers starts again from its first (those then count as
-- already_ordered, which the outcome counts show).

local tokens, next_token = {}, 0

function init_tokens(args)
  local stride, line = tonumber(args[3]), 0
  for token in io.lines(args[2]) do
    if line % stride == id then
      tokens[#tokens + 1] = "Bearer " .. token
    end
    line = line + 1
  end
end

function request()
  next_token = next_token % #tokens + 1
  return wrk.format(nil, nil, { ["Authorization"] = tokens[next_token] })
end
