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

-- Hands units to the entrants in the order of their places among those who fit the units
-- left, at most `most` of them while `stock` lasts, each her whole quantity by
-- `hand(user, units)` (admission.lua's: queues her purchase; nil when no ticket is left
-- this second). An entrant who holds a purchase or an order of the sale already is taken
-- out; one who asked for more than is left keeps her place, for units given back. It
-- looks at no more than 4 * `most` entrants a press. One handed her units is noted in
-- `drawn` (a hash: user id -> 1), which lives until `expire_at`, and her units counted in
-- `metrics` under "line:handed". Returns the stock left,
-- and whether an entrant fits it still (a press that finds units left and such entrants
-- leaves the units to them).
local function hand_to_entrants(hand, lines, drawn, buyers, metrics, stock, most, expire_at)
  -- Each line's first entrant, {user, place}, read once and again when taken (false: none).
  local heads = {}
  local function head(units)
    if heads[units] == nil then
      local first = redis.call('ZRANGE', lines[units], 0, 0, 'WITHSCORES')
      heads[units] = #first > 0 and {first[1], tonumber(first[2])}
    end
    return heads[units]
  end
  -- The quantity of the first place among the lines that fit the units left, or nil.
  local function first_fitting()
    local best
    for units = 1, math.min(stock, #lines) do
      local entrant = head(units)
      if entrant and (not best or entrant[2] < head(best)[2]) then
        best = units
      end
    end
    return best
  end
  local handed, looked = 0, 0
  while stock > 0 and handed < most and looked < 4 * most do
    local units = first_fitting()
    if not units then
      return stock, false
    end
    looked = looked + 1
    local user = head(units)[1]
    local held = redis.call('HGET', buyers, user)
    if held and kind_of(held) ~= POINTED and kind_of(held) ~= WALKING then
      redis.call('ZREM', lines[units], user)
    else
      if not hand(user, units) then
        return stock, true
      end
      redis.call('ZREM', lines[units], user)
      redis.call('HSET', drawn, user, 1)
      redis.call('PEXPIREAT', drawn, expire_at)
      redis.call('HINCRBY', metrics, 'line:handed', units)
      stock = stock - units
      handed = handed + 1
    end
    heads[units] = nil
  end
  return stock, stock > 0 and first_fitting() ~= nil
end
