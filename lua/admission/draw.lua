-- admission/draw.lua: the opening draw's hand-out, for admission.lua (core/build.rs puts
-- it before that script; see its "The draw").
--
-- Hands units to the draw's entrants in the order of their places (`entrants`, a sorted
-- set of user ids scored by entry_score below), at most `most` of them while `stock`
-- lasts, each her whole quantity by `hand(user, units)` (admission.lua's: queues her
-- purchase; nil when no ticket is left this second). An entrant who holds a purchase or
-- an order of the sale already is taken out; one who asked for more units than are left
-- is passed over and keeps her place, for a unit given back. It looks at no more than
-- 4 * `most` entrants a press. One handed her units is noted in `drawn` (a hash: user id
-- -> 1), which lives until `expire_at`. Returns the stock left, and whether an entrant
-- it did not look at may still be handed units (a press that finds units left and such
-- entrants leaves the units to them).

-- An entrant's score: her place (below 2^48, so that the score is exact in a double) and
-- her units (at most 10, core/src/sale/mod.rs's MOST_PER_BUYER) in its low 4 bits.
local function entry_score(place, units)
  return place * 16 + units
end

local function units_of_entrant(score)
  return tonumber(score) % 16
end

local function hand_to_entrants(hand, entrants, drawn, buyers, stock, most, expire_at)
  local handed, looked = 0, 0
  local start = 0
  while stock > 0 and handed < most and looked < 4 * most do
    local next = redis.call('ZRANGE', entrants, start, start, 'WITHSCORES')
    if #next == 0 then
      return stock, false
    end
    looked = looked + 1
    local user, units = next[1], units_of_entrant(next[2])
    local held = redis.call('HGET', buyers, user)
    if held and kind_of(held) ~= POINTED and kind_of(held) ~= WALKING then
      redis.call('ZREM', entrants, user)
    elseif units > stock then
      start = start + 1
    else
      if not hand(user, units) then
        return stock, true
      end
      redis.call('ZREM', entrants, user)
      redis.call('HSET', drawn, user, 1)
      redis.call('PEXPIREAT', drawn, expire_at)
      stock = stock - units
      handed = handed + 1
    end
  end
  return stock, stock > 0 and redis.call('ZCARD', entrants) > start
end
