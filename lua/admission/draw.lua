-- admission/draw.lua: the sale's line and its hand-out, for admission.lua (core/build.rs
-- puts it before that script; see its "The draw" and "The line").
--
-- The line holds an opening draw's entrants and the buyers who joined it after a sold-out
-- answer. It is one sorted set per quantity (`lines[units]`: the entrants who asked for that
-- many units, user ids scored by their places), so that a hand-out finds the first place
-- that fits the units left among the heads of the lines that fit, however many entrants
-- ahead of it asked for more: each unit handed costs a lookup per line, whatever the
-- line's length and its mix of quantities. A place below LATE was drawn at random (a
-- draw's entry, or a join within the line's first moments, `line_window_ms`); one from
-- LATE on is LATE plus the join's number, so that later joins go to the back in order.

local LATE = 281474976710656 -- 2^48

-- The units the entrant `user` asked for: the line she is in, or nil for no entrant.
local function line_of(lines, user)
  for units = 1, #lines do
    if redis.call('ZSCORE', lines[units], user) then
      return units
    end
  end
  return nil
end

-- Enters `user` at `place` for `units` units; pressing again changes neither.
local function enter(lines, user, place, units, expire_at)
  if not line_of(lines, user) then
    redis.call('ZADD', lines[units], place, user)
    redis.call('PEXPIREAT', lines[units], expire_at)
  end
end

-- How many wait in the line, of every quantity.
local function line_length(lines)
  local length = 0
  for units = 1, #lines do
    length = length + redis.call('ZCARD', lines[units])
  end
  return length
end

-- The entrant's place in line for units given back, from 1: the entrants of every line
-- ahead of her.
local function place_in_line(lines, user, units)
  local place = redis.call('ZSCORE', lines[units], user)
  local ahead = 0
  for other = 1, #lines do
    ahead = ahead + redis.call('ZCOUNT', lines[other], '-inf', '(' .. place)
  end
  return ahead + 1
end

-- Hands units to the entrants in the order of their places, at most `most` of them while
-- `stock` lasts, each her whole quantity by `hand(user, units)` (admission.lua's: queues
-- her purchase; nil when no ticket is left this second). The first in line who asks for
-- more than is left is passed over once: the units go to the first behind her who fits
-- them. Then the units wait for her for `hold_ms` (the voucher's "held_for",
-- "<user>:<since>"), gathering as more come back, so that nobody is skipped for good
-- while units come back, and nobody outside the line takes them meanwhile. Past her
-- hold, she is passed over again (her hold starts again), or, with nobody in line
-- fitting, the units are anyone's: units never wait for good either. An entrant who
-- holds a purchase or an order of the sale already is taken out. It looks at no more than
-- 4 * `most` entrants a press. One handed her units is noted in `drawn` (a hash: user id
-- -> 1), which lives until `expire_at`, and her units counted in `metrics` under
-- "line:handed". Returns the units left for this press (none while they wait for the
-- first in line), and whether anyone waits in line for them still (a press that finds
-- units left and such entrants leaves the units to them).
local function hand_to_entrants(hand, lines, drawn, buyers, metrics, voucher, stock, most,
    expire_at, now, hold_ms)
  -- Each line's first entrant, {user, place}, read once and again when taken (false: none).
  local heads = {}
  local function head(units)
    if heads[units] == nil then
      local first = redis.call('ZRANGE', lines[units], 0, 0, 'WITHSCORES')
      heads[units] = #first > 0 and {first[1], tonumber(first[2])}
    end
    return heads[units]
  end
  -- The quantity of the first place among the lines of at most `upto` units, or nil.
  local function first_in(upto)
    local best
    for units = 1, math.min(upto, #lines) do
      local entrant = head(units)
      if entrant and (not best or entrant[2] < head(best)[2]) then
        best = units
      end
    end
    return best
  end
  -- Whether `user` holds a purchase or an order of the sale already: she is taken out.
  local function holds(user)
    local record = redis.call('HGET', buyers, user)
    return record and kind_of(record) ~= POINTED and kind_of(record) ~= WALKING
  end
  -- Hands the first of the line of `units` hers, or takes her out; "handed", "out", or nil
  -- when no ticket is left this second.
  local function serve(units)
    local user = head(units)[1]
    heads[units] = nil
    if holds(user) then
      redis.call('ZREM', lines[units], user)
      return 'out'
    end
    if not hand(user, units) then
      return nil
    end
    redis.call('ZREM', lines[units], user)
    redis.call('HSET', drawn, user, 1)
    redis.call('PEXPIREAT', drawn, expire_at)
    redis.call('HINCRBY', metrics, 'line:handed', units)
    stock = stock - units
    return 'handed'
  end
  -- Her hold, {user, since}, read when first needed: a sold-out press reads nothing here.
  local hold
  local function hold_of(user)
    if hold == nil then
      local held = redis.call('HGET', voucher, 'held_for')
      local colon = held and string.find(held, ':', 1, true)
      hold = colon and {string.sub(held, 1, colon - 1), tonumber(string.sub(held, colon + 1))}
        or false
    end
    return hold and hold[1] == user and hold[2]
  end
  local handed, looked = 0, 0
  while stock > 0 and handed < most and looked < 4 * most do
    local first = first_in(#lines)
    if not first then
      return stock, false
    end
    looked = looked + 1
    local units, user = first, head(first)[1]
    local passing = first > stock and not holds(user)
    if passing then
      -- She waits for more than is left: passed over once, then her hold.
      local since = hold_of(user)
      local holding = since and now < since + hold_ms
      units = not holding and first_in(stock)
      if not units and not since then
        hold = {user, now}
        redis.call('HSET', voucher, 'held_for', user .. ':' .. now)
      end
      if not units then
        return (holding or not since) and 0 or stock, false
      end
    end
    local served = serve(units)
    if not served then
      return stock, true
    end
    if served == 'handed' then
      handed = handed + 1
      if passing then
        hold = {user, now}
        redis.call('HSET', voucher, 'held_for', user .. ':' .. now)
      end
    end
  end
  return stock, stock > 0 and first_in(#lines) ~= nil
end
