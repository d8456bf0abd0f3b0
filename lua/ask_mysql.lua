-- ask_mysql.lua: before MySQL is asked about a voucher id Redis holds no sale for, whether
-- the deployment's highest voucher id already says it does not exist, and, for the
-- lookups purchases and product pages share, whether this request may ask (one a
-- second for the ids of a lookup slot). On one Redis admission reads the same key and answers "unknown" itself; on a
-- Redis Cluster each slot keeps its own copy, which a slot that has learnt nothing yet
-- lacks: this key, which every creation and lookup raises, answers for it.
--
-- KEYS[1]  seckill:{seckill}:highest-voucher  string: the highest voucher id MySQL is
--                                             known to have handed out
-- KEYS[2]  seckill:{seckill}:probe:voucher-lookup:<slot>  string: held for a second by
--                                             the one request that may ask MySQL about
--                                             an id of the slot (the id modulo the slots;
--                                             absent: only the check)
-- KEYS[3]  seckill:{seckill}:probe:voucher-lookup  string: the same, for every id while
--                                             the highest id is not known (with KEYS[2])
-- ARGV[1]  voucher_id  the voucher id (a canonical decimal)
-- ARGV[2]  probe_ms    how long the lookup probe is held, milliseconds
--
-- Returns {"unknown", <highest>} when the id is above the highest; else {"ask"} when
-- this request may ask MySQL (or only the check was asked for), {"wait"} when another
-- request holds the probe.

local voucher_id, probe_ms = ARGV[1], ARGV[2]

local highest = redis.call('GET', KEYS[1])
-- Decimal strings compared by length, then by digits: Lua numbers lose ids above 2^53.
if highest and (#voucher_id > #highest
    or (#voucher_id == #highest and voucher_id > highest)) then
  return {'unknown', highest}
end
-- Without the highest id, any id may be a made-up one: one lookup a second for them all,
-- whose answer sets it, after which made-up ids above it never reach MySQL.
if not KEYS[2] or redis.call('SET', highest and KEYS[2] or KEYS[3], 1, 'NX', 'PX', probe_ms) then
  return {'ask'}
end
return {'wait'}
