-- end_turn.lua: a settle (a payment, a cancellation) hands its slot's turn at settling on
-- (src/storage/turns.rs): the turn is released while it is still this settle's, and the
-- settle that has waited longest is woken to take it, rather than finding it free only
-- at its next look.
--
-- KEYS[1]  seckill:{<slot tag>}:settling       string: the token of the settle whose turn
--                                              it is
-- KEYS[2]  seckill:{<slot tag>}:settling-wake  list: at most one wake-up, for the waiting
--                                              settles' BLPOP
-- ARGV[1]  token    the token the turn is held under
-- ARGV[2]  wake_ms  how long a wake-up nobody took lasts, milliseconds
--
-- Returns 1 when the turn was this token's and is handed on, else 0 (it lapsed: whoever
-- holds it now wakes the next one).

local token, wake_ms = ARGV[1], ARGV[2]

if redis.call('GET', KEYS[1]) ~= token then
  return 0
end
redis.call('DEL', KEYS[1])
-- One wake-up at most: a turn handed on while nobody waits leaves the next waiter one
-- look, not a pile of them.
redis.call('DEL', KEYS[2])
redis.call('RPUSH', KEYS[2], 1)
redis.call('PEXPIRE', KEYS[2], wake_ms)
return 1
