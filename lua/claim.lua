-- claim.lua: what a queued purchase's request does when it has waited a while without
-- news: collect its outcome if one came, or take the lease over when the drainer is gone.
--
-- KEYS[1]  seckill:{<voucher>}:buyers        hash: user id -> "q:<ticket>" | "o:<order id>"
--                                            | "e:<order id>" (another bucket's), ...
-- KEYS[2]  seckill:{<voucher>}:lease         string: the drainer's token
-- KEYS[3]  seckill:{<voucher>}:done:<user id>:<ticket>  list: this purchase's outcome
--                                                       (publish.lua)
-- ARGV[1]  user      user id
-- ARGV[2]  ticket    ticket
-- ARGV[3]  lease_ms  lease lifetime, milliseconds
--
-- Returns one of:
--   {"outcome", <news>}  as publish.lua left it: a verdict in JSON, {"outcome":
--              <outcome>, "order": "<order id>"}, or "lead"
--   {"lead"}   the lease was free: this request now drains, with its entry as token
--   {"wait"}   the purchase is still queued and someone drains
--   {"held", "<order id>"}  no outcome, but the buyer's record says she holds this order:
--              a sync recorded it (committed by a drainer whose publication was lost);
--              the caller tells whether it is this purchase's order
--   {"lost"}   the purchase is no longer queued and left no outcome: Redis lost it (a
--              restart); the buyer's next press, after the admin's sync, hears the truth

local buyers, lease, done = KEYS[1], KEYS[2], KEYS[3]
local user, ticket, lease_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])

local outcome = redis.call('LPOP', done)
if outcome then
  return {'outcome', outcome}
end
local record = redis.call('HGET', buyers, user)
if record and (kind_of(record) == ORDERED or kind_of(record) == ELSEWHERE) then
  return {'held', named_by(record)}
end
if record ~= QUEUED .. ticket then
  return {'lost'}
end
if redis.call('SET', lease, user .. ':' .. ticket, 'NX', 'PX', lease_ms) then
  return {'lead'}
end
return {'wait'}
