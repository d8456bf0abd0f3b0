-- admission/draw.lua: the opening draw's hand-out, for admission.lua (core/build.rs puts
-- it before that script; see its "The draw").
--
-- Hands units to the draw's entrants in the order of their places (`entrants`, a sorted
-- set of user ids by place), at most `most` of them while `stock` lasts, each by
-- `hand(user)` (admission.lua's: queues her purchase; nil when no ticket is left this
-- second). An entrant who holds a purchase or an order of the sale already is passed
-- over; one handed a unit is noted in `drawn` (a hash: user id -> 1), which lives until
-- `expire_at`. Returns the stock left.
local function hand_to_entrants(hand, entrants, drawn, buyers, stock, most, expire_at)
  local handed = 0
  while stock > 0 and handed < most do
    local first = redis.call('ZPOPMIN', entrants)
    if #first == 0 then
      break
    end
    local held = redis.call('HGET', buyers, first[1])
    if not held or kind_of(held) == POINTED or kind_of(held) == WALKING then
      if not hand(first[1]) then
        redis.call('ZADD', entrants, first[2], first[1])
        break
      end
      redis.call('HSET', drawn, first[1], 1)
      redis.call('PEXPIREAT', drawn, expire_at)
      stock = stock - 1
      handed = handed + 1
    end
  end
  return stock
end

