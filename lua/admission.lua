-- admission.lua: decide a buyer in one atomic step. "admitted" is the decision: the
-- buyer holds the units she asked for, all of them, and her purchase is queued for the
-- next group commit into MySQL. Once every unit is handed out, every other buyer hears
-- "sold_out" here at once.
--
-- KEYS[1]  seckill:{<voucher>}:voucher  hash: stock, begin_ms, end_ms, per_buyer,
--                                       announce_ms (and, for reads, initial_stock, title,
--                                       description)
-- KEYS[2]  seckill:{<voucher>}:buyers   hash: user id -> "q:<ticket>" (queued: holds a unit,
--                                                          not yet committed)
--                                                       | "o:<order id>" (committed)
--                                                       | "e:<order id>" (committed by
--                                                         another bucket of the sale)
--                                                       | "c:<order id>" | "x:<order id>"
--                                                         (cancelled, expired)
--                                                       | "w:<bucket>" | "p:<walks>" (her
--                                                         home bucket's pointer: "Buckets")
-- KEYS[3]  seckill:{<voucher>}:queue    list: "<user id>:<ticket>" of each queued purchase,
--                                       oldest first (a ticket names its units: records.lua)
-- KEYS[4]  seckill:{<voucher>}:lease    string: the token of the one request draining the
--                                       queue into MySQL, with a TTL
-- KEYS[5]  seckill:{<slot tag>}:order-seq  prefix of the slot's order sequence, one key a
--                                       second: the script appends ":<unix seconds>"
-- KEYS[6]  seckill:{<voucher>}:absent   string: MySQL said no such voucher (a minute)
-- KEYS[7]  seckill:{<voucher>}:metrics  hash: the voucher's counters; this script counts
--                                       each decision under "purchase:<outcome>"
-- KEYS[8]  seckill:{<slot tag>}:highest-voucher  string: the highest voucher id MySQL is
--                                       known to have handed out (load.lua, probed.lua)
-- KEYS[9]  seckill:{<voucher>}:sweep    string: held by the one request expiring the
--                                       voucher's unpaid orders past their deadline
-- KEYS[10] seckill:{<voucher>}:all-out  string: records.lua's ALL_OUT once a press of
--                                       this bucket's buyer found every bucket of the
--                                       sale empty, until units come back (see "Buckets"
--                                       below); REOPENED a moment after they did
-- KEYS[11] seckill:{<voucher>}:drawn    hash: user id -> 1, each entrant handed a unit
--                                       who has not pressed since (see "The draw")
-- KEYS[12] seckill:{<voucher>}:seen-out  hash: a bucket's place in the sale -> when a
--                                       press here, or a walk passing here, last saw it
--                                       sold out, unix ms (see "Buckets")
-- KEYS[13] seckill:{<voucher>}:entrants:1  sorted set: the opening draw's line of the
--                                       entrants asking for 1 unit not yet handed it, by
--                                       their places (see "The draw")
-- KEYS[14] seckill:{<voucher>}:entrants:2  the line of those asking for 2 units
-- KEYS[15] seckill:{<voucher>}:entrants:3  the line of those asking for 3 units
-- KEYS[16] seckill:{<voucher>}:entrants:4  the line of those asking for 4 units
-- KEYS[17] seckill:{<voucher>}:entrants:5  the line of those asking for 5 units
-- KEYS[18] seckill:{<voucher>}:entrants:6  the line of those asking for 6 units
-- KEYS[19] seckill:{<voucher>}:entrants:7  the line of those asking for 7 units
-- KEYS[20] seckill:{<voucher>}:entrants:8  the line of those asking for 8 units
-- KEYS[21] seckill:{<voucher>}:entrants:9  the line of those asking for 9 units
-- KEYS[22] seckill:{<voucher>}:entrants:10  the line of those asking for 10 units
-- ARGV[1]  user         user id (decimal string)
-- ARGV[2]  lease_ms     lease lifetime, milliseconds
-- ARGV[3]  batch_size   most purchases a drainer takes in one batch
-- ARGV[4]  max_queued   most purchases queued at once; past it "throttled" (a safety valve,
--                       see docs/design.md)
-- ARGV[5]  keep_ms      how long the sale's keys outlive its end (or now, for a sale that
--                       ended earlier), milliseconds: each key this script writes expires
--                       then, so a finished sale leaves nothing behind for good
-- ARGV[6]  voucher_id   the voucher id (a canonical decimal)
-- ARGV[7]  sweep_ms     how long a sweep holds KEYS[9], milliseconds
-- ARGV[8]  audit_ms     how often a pressed sale is audited, milliseconds (below)
-- ARGV[9]  slot         the voucher's Redis Cluster slot (0..16383), the order id's bits
--                       18..32
-- ARGV[10] route        where the press is on the buyer's walk round the sale's buckets:
--                       "unrouted" (the caller does not know them), "home" (her own
--                       bucket), "walk" (another) or "lone_walk" (another, on the only walk
--                       of hers under way)
-- ARGV[11] draw_place   the buyer's place in the draw if she enters it: a random integer
--                       below 2^48 the component drew for this press
-- ARGV[12] draw_batch   most entrants a press hands units to
-- ARGV[13] buckets      how many buckets the sale has, when the caller knows them (else 0)
-- ARGV[14] here         this bucket's place among them (0-based, the first bucket's
--                       "buckets" order)
-- ARGV[15] sightings    the sightings this press's walk gathered: "<place>:<unix ms>,..."
--                       ("" for none), each when a bucket saw that one sold out
-- ARGV[16] sighting_ms  how long a sighting of a bucket sold out counts, milliseconds
-- ARGV[17] units        the units the buyer asks for (1 to 10; docs/design.md,
--                       "Quantities"): she is handed all of them or none
-- ARGV[18] created      when the sale whose buckets routed the press was created
--                       ("created", unix seconds; 0: not known): a list kept for a sale id
--                       may be of a lost sale of the id (docs/design.md, "A reused id"),
--                       and a press it routes here is sent to learn the buckets again
--                       unless this bucket is of that creation
-- ARGV[19] all_out_ms   how long a bucket's all-out mark lasts, milliseconds: a unit given
--                       back to another bucket reopens the mark at once (records.lua), so
--                       this only bounds a mark whose reopening was lost
-- ARGV[20] line         what the buyer asks of the sale's line (see "The line"): "press" (a
--                       purchase), "join" (a purchase, or her place in line when nothing
--                       is left for her) or "look" (her standing: never a new purchase)
-- ARGV[21] line_window_ms  how long after the line opens a join draws its place at random
--                       (draw_place), milliseconds; later joins go to the back in order
-- ARGV[22] line_hold_ms  how long units wait for the first in line once she was passed
--                       over (admission/draw.lua), milliseconds
--
-- The draw (docs/design.md, "The opening draw"): a sale with "draw_ms" takes the presses
-- of [begin_ms, begin_ms + draw_ms) as entries, each at the random place its first press
-- drew, for the units that press asked for (pressing again changes neither), and answers
-- {"in_draw", 0, draw_at, now}. From draw_at on, the sale's units go to the entrants in
-- the order of their places before anyone else, each her whole quantity: each press hands
-- out to up to draw_batch of them (the first ones after draw_at hand out the stock: the
-- draw; later ones, units given back: the waitlist), and their purchases are queued as
-- admitted ones are; an entrant who asked for more than is left keeps her place, and
-- the units wait for her once one went past her (admission/draw.lua: her hold), gathering
-- as they come back (KEYS[13..22], a line per quantity). An entrant not handed units
-- hears {"waitlisted", ...} (see "The line"); units no entrant fits are anyone's, first
-- come first served, past the first in line's hold.
-- No request of hers waits for the purchase the draw queued for an entrant (KEYS[11]):
-- her first press after it hears it as her own, {"admitted", ...} while it is queued
-- (her request waits for its commit and answers 201) and {"won", lead, "<order id>"}
-- once committed (201 too); later presses hear "queued" and "already_ordered".
--
-- The line (docs/design.md, "The line"): in a sale of one bucket that is live, a buyer
-- with nothing here for her (sold out, too few units, or units the line's buyers come
-- first for) may join the line ("join"), for the units she asks for. The first join opens
-- it ("line_from"); a join within line_window_ms of that draws her place at random, as a
-- draw's entry, so that joining first wins nothing, and a later one goes to the back. A
-- draw's line is the sale's line: a join after the draw goes to its back. From then on
-- the units given back go to the line first, exactly as a draw's do after draw_at, and a
-- buyer in line hears {"waitlisted", lead, place, length, returned, since_ms,
-- pay_within_s}: her place, how many wait, the units given back to the sale since the
-- line opened ("units:returned" in KEYS[7], less "line_base") over since_ms, and how long
-- an order the line hands her waits for her payment. A look ("look") answers as
-- a press would to her record (her handed purchase, "admitted", which her request then
-- commits; her order), her place, or {"not_in_line", lead, length}: it never takes units.
-- A sale in buckets has no line: a join or a look there hears {"no_line", 0}.
--
-- Two of its jobs have files of their own, which core/build.rs puts before this one:
-- the draw's hand-out (admission/draw.lua) and a sold-out bucket's sightings
-- (admission/sightings.lua).
--
-- Buckets (docs/design.md): a sale of several buckets is a voucher hash per bucket, the
-- first with "buckets" (the others' ids), each other with "sale" (the first's id). A press
-- that does not know them (route "unrouted") hears {"buckets", 0, "<ids>"} from the
-- first, and presses again at the buyer's bucket. A bucket that is sold out answers
-- "bucket_out": the caller tries the next one, and answers sold_out after the last (a
-- bucket with units left but fewer than she asked for answers "bucket_out" too, naming
-- them, and notes no sighting: she answers "short" after the last, naming the most any
-- bucket had); then
-- it marks KEYS[10] of the buyer's bucket, which answers sold_out by itself until units
-- come back to any bucket (all_out_ms at most), so that the sold-out flood, and a lone
-- press after a quiet, cost one script a press. Units given back to a bucket clear its
-- own mark in the script that gives them (records.lua), and the request that gave them
-- then reopens every other bucket of the sale (core/src/returns.rs): its mark is
-- REOPENED for longer than a sighting counts and a walk takes, so that nothing seen
-- before the units came back marks it again. A walk's press ("walk")
-- is never stopped by another bucket's mark or end: it looks for her record in each.
-- Only her only walk under way ("lone_walk": her home had no record of hers) stops at a
-- bucket marked all out, with "sold_out": no bucket can hold a record of hers then, and
-- the mark says what it says to that bucket's own buyers. So once one bucket is marked,
-- the walks of a sold-out crowd end there and mark their own homes.
-- A bucket also marks itself, at once, when it knows every bucket sold out within the
-- last moment (sighting_ms): each press that finds it sold out notes so in KEYS[12], a
-- walk's press brings the sightings its walk gathered (sightings), and its "bucket_out"
-- hands the walk what this bucket knows, each sighting with the time it was made (so
-- none outlives the moment by being passed on). So as a crowd runs a sale out, the walks
-- under way carry what the buckets saw both ways round, and the buckets stop sending
-- buyers round well before any one walk has seen them all. A lone walk whose own press
-- marked the bucket so is not stopped by that mark: it ends as a walk that saw every
-- bucket empty does, marking the others, rather than leave one bucket marked.
--
-- Her record at home follows her walks, so that her later presses find her purchase
-- whatever the marks or the end say: a press at home sent on a walk ("bucket_out", or
-- "walk" below) counts it, "p:<walks under way>"; a walk then points the record at the
-- bucket holding her purchase, "w:<bucket>", or uncounts itself when it found none
-- (walk_end.lua). A press at home finding "w:<bucket>" answers {"walked", lead,
-- "<bucket>"}: go there. Finding walks under way with nothing to sell her here (sold out,
-- or ended), it answers {"walk", lead, ended (0 or 1)} and counts one more: look in
-- every other bucket, since a walk of hers may be holding a unit there.
--
-- The window follows Redis's clock, which can step back (an NTP step, a failover to a
-- replica whose clock lags). The sale's clock never does: the first decision made at or
-- after begin_ms sets the hash's "begun", the first at or after end_ms its "ended", and
-- from then on the sale is begun (ended) whatever TIME says, so "ended" stays final.
--
-- A ticket is "<unix seconds>:<sequence>": the caller builds the 64-bit order id from its
-- two parts (Lua numbers are doubles). The sequence is the slot's (bits 18..32) and the
-- slot's count within the second (bits 0..18), so that every slot of a Redis Cluster
-- hands out ids of its own without a key shared by two slots (docs/design.md). A purchase is named by its queue entry
-- "<user id>:<ticket>", never by its ticket alone: a sequence lost in a Redis restart can
-- hand the same ticket to another buyer.
--
-- Expiry rides on the sale's own presses (Spin has no timers): once Redis's clock passes
-- the voucher's "sweep_at" (the earliest deadline of an unpaid order, publish.lua), the
-- first press that finds KEYS[9] free takes it, and its reply starts with "sweep": that
-- request expires the orders due in MySQL and gives their units back (restock.lua)
-- before it goes on. Every other press pays nothing for it. Every sweep also audits: it
-- checks that MySQL holds every order Redis learnt of, and commits again those it lost
-- (core/src/returns.rs). So that a sale is audited while pressed even with no deadline
-- due (a sold-out sale after a MySQL failover commits nothing that could notice), a press
-- sweeps when the last sweep a press or read took began audit_ms ago ("audit_at"; the first
-- press or read sets it, so a sale's opening second pays for no audit). A press with
-- nothing here for her (sold_out, short, bucket_out, walk) that finds expiries due and the
-- lease taken hears "sweeping" in front of its reply instead: she waits for that sweep's
-- end (end_sweep.lua) and presses again.
--
-- Returns {outcome, lead, fields...}, where lead is 1 when this request now holds the
-- lease and must drain the queue (the lease was free and purchases are queued), else 0:
--   {"admitted", lead, <seconds>, <sequence>, <units>}  the units are this buyer's; her
--                        ticket
--   {"queued", lead, <seconds>, <sequence>, <units>}  her earlier purchase is still queued
--   {"too_many", 0, per_buyer}  she asked for more units than the sale lets one buyer
--                        hold, and this bucket holds no purchase of hers (else she hears
--                        it, as below): nothing was decided or counted
--   {"short", lead, left}  fewer units are left than she asked for (none taken); a sale
--                        of one bucket
--   {"already_ordered", lead, "<order id>"}
--   {"won", lead, "<order id>", <units>}  the draw's order of hers, committed: her first
--                        word of it
--   {"cancelled", lead, "<order id>"} | {"expired", lead, "<order id>"}  her order was
--                        cancelled or expired: she may not buy again in this sale
--   {"sold_out", lead, sightings}  sold out; sightings (as ARGV[15]): this bucket's place
--                        and its mark's <since> when a mark said so (records.lua), else ""
--   {"ended", lead}
--   {"bucket_out", lead, sightings, left}  this bucket of the sale has fewer units than
--                        she asked for (left: how many; 0 sold out): try the next; what it
--                        knows of the sale's buckets sold out, as sightings
--   {"in_draw", lead, draw_at, now}  an entrant of the draw (unix ms): press after draw_at
--   {"waitlisted", lead, place, length, returned, since_ms, pay_within_s}  a buyer in the
--                        sale's line (a draw's loser, or one who joined): her place for
--                        units given back, the line's length, the units given back since
--                        it opened since_ms ago, and the sale's payment window, seconds
--   {"not_in_line", lead, length}  a look of a buyer with no place and no record
--   {"no_line", 0}       a join or a look at a sale in buckets
--   {"buckets", 0, "<id>,<id>..."}  the sale's other buckets, in order (route)
--   {"walked", lead, "<bucket>"}  her purchase is in that bucket of the sale (at home)
--   {"walk", lead, ended, left}  a walk of hers may hold a unit in another bucket (at
--                        home), and this bucket has `left` units, fewer than she asked for
--   {"throttled", lead}
--   {"missing", 0}       no sale state: Redis lost it (or lost part of it: "stale"), or
--                        the voucher does not exist
--   {"unknown", 0}       no sale state, and no such voucher: its id is above the highest
--                        MySQL handed out, or MySQL said so lately; or the sale is not
--                        listed yet (announce_ms ahead of Redis's clock), nothing counted;
--                        or an unrouted press at a later bucket of a sale, which is no
--                        voucher of its own
--   {"not_started", 0}
-- "missing" and "unknown" are not counted: a voucher Redis holds nothing for gets no keys.
-- With lead 1, the lease token and the first batch (queue entries, oldest first) follow
-- the fields. An admitted request holds the lease under its queue entry; any other under
-- "r:<time>:<user>".

local voucher, buyers, queue, lease, metrics = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[7]
local user, lease_ms, batch_size, max_queued, keep_ms, voucher_id =
  ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local sweep_ms, audit_ms, slot, route, draw_place, draw_batch =
  ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10], ARGV[11], tonumber(ARGV[12])
local buckets, here, sightings, sighting_ms, units, created, all_out_ms =
  tonumber(ARGV[13]), tonumber(ARGV[14]), ARGV[15], tonumber(ARGV[16]), tonumber(ARGV[17]),
  ARGV[18], tonumber(ARGV[19])
local line, line_window_ms, line_hold_ms = ARGV[20], tonumber(ARGV[21]), tonumber(ARGV[22])

-- Only a complete hash is a sale: a publication that raced a Redis restart must not
-- pass for one. A sale found behind MySQL ("stale", see publish.lua) is no sale either,
-- until a sync.
local state = hash_fields(voucher, {'stock', 'begin_ms', 'end_ms', 'stale', 'begun', 'ended',
  'sweep_at', 'audit_at', 'buckets', 'sale', 'draw_ms', 'drawn', 'per_buyer', 'created',
  'announce_ms', 'line_from'})
local time = redis.call('TIME')
local seconds = tonumber(time[1])
local now = seconds * 1000 + math.floor(tonumber(time[2]) / 1000)
-- Unlisted: as unknown as an id above the highest, before anything else is told.
if now < tonumber(state.announce_ms or '0') then
  return {'unknown', 0}
end
-- A later bucket of a sale is no voucher of its own: a press not routed by the sale's
-- buckets names the sale by its id, the first bucket's (docs/design.md, "Buckets").
if route == 'unrouted' and state.sale then
  return {'unknown', 0}
end
-- Routed by buckets of another creation (or to a bucket cleared since): the first bucket
-- names the sale's, a later one none, which sends the press to the first; there, a press
-- routed by fewer or more buckets than the sale's hears them too.
if route ~= 'unrouted' then
  local first, sale_buckets = here == 0 and buckets ~= 0, 1
  if state.buckets and state.buckets ~= '' then
    sale_buckets = select(2, string.gsub(state.buckets, ',', ',')) + 2
  end
  if (created ~= '0' and state.created ~= created)
      or (first and state.stock and sale_buckets ~= buckets) then
    return {'buckets', 0, first and state.buckets or ''}
  end
end
if not (state.stock and state.begin_ms and state.end_ms) or state.stale then
  if redis.call('EXISTS', KEYS[6]) == 1 then
    return {'unknown', 0}
  end
  -- Decimal strings compared by length, then by digits: Lua numbers lose ids above 2^53.
  local highest = redis.call('GET', KEYS[8])
  if highest and (#voucher_id > #highest or (#voucher_id == #highest and voucher_id > highest)) then
    return {'unknown', 0}
  end
  return {'missing', 0}
end
-- A buyer asking for more than the sale allows hears her purchase if this bucket holds a
-- record of one (the record's answers below), else the limit.
local per_buyer = tonumber(state.per_buyer or '1')
if units > per_buyer then
  local record = redis.call('HGET', buyers, user)
  if not record or kind_of(record) == WALKING then
    return {'too_many', 0, per_buyer}
  end
end
if line ~= 'press' and (state.buckets or state.sale) then
  return {'no_line', 0}
end
if state.buckets and route == 'unrouted' then
  return {'buckets', 0, state.buckets}
end

local begin_ms, end_ms = tonumber(state.begin_ms), tonumber(state.end_ms)
local begun, ended = state.begun or now >= begin_ms, state.ended or now >= end_ms
if ended and not state.ended then
  redis.call('HSET', voucher, 'ended', 1)
elseif begun and not state.begun then
  redis.call('HSET', voucher, 'begun', 1)
end

local expire_at = math.max(end_ms, now) + keep_ms

-- A look is no purchase: it counts nothing.
local function count(outcome)
  if line ~= 'look' then
    redis.call('HINCRBY', metrics, 'purchase:' .. outcome, 1)
    redis.call('PEXPIREAT', metrics, expire_at)
  end
end

if not begun and not ended then
  count('not_started')
  return {'not_started', 0}
end
local lines = {unpack(KEYS, 13)}
local draw_at = begin_ms + tonumber(state.draw_ms or '0')
local draws = draw_at > begin_ms
local drawing = draws and not ended
-- Units given back go to the line first: a draw's from draw_at on, any sale's once a
-- join opened it.
local lined = (draws or state.line_from) and not ended
-- The window closes for good once a press finds the clock past it ("drawn"), as the
-- sale's clock does for its boundaries.
if drawing and not state.drawn then
  if now < draw_at then
    if line == 'look' and not line_of(lines, user) then
      return {'not_in_line', 0, line_length(lines)}
    elseif line ~= 'look' then
      enter(lines, user, draw_place, units, expire_at)
    end
    count('in_draw')
    return {'in_draw', 0, draw_at, now}
  end
  redis.call('HSET', voucher, 'drawn', 1)
end
local audit_at = tonumber(state.audit_at or '')
if not audit_at then
  redis.call('HSET', voucher, 'audit_at', now + audit_ms)
end
local expiring = state.sweep_at and now >= tonumber(state.sweep_at)
local sweep = (expiring or audit_at and now >= audit_at)
  and redis.call('SET', KEYS[9], 1, 'NX', 'PX', sweep_ms)
if sweep then
  redis.call('HSET', voucher, 'audit_at', now + audit_ms)
end
-- Expiries are due and another request holds the lease: it may be giving units back
-- this very moment. A press with nothing here for her hears so ("sweeping" in front of
-- her reply), and waits for the sweep's end.
local sweeping = expiring and not sweep
local nothing_here = {sold_out = true, short = true, bucket_out = true, walk = true}

-- Takes the free lease for `token` when purchases wait in the queue (the drainer died
-- or stalled, or this is the first purchase of a quiet queue). Returns the reply.
local function reply(answer, token)
  count(answer[1])
  local tagged = sweep or (sweeping and nothing_here[answer[1]])
  if tagged then
    table.insert(answer, 1, sweep and 'sweep' or 'sweeping')
  end
  local at = tagged and 3 or 2
  if redis.call('EXISTS', lease) == 1 or redis.call('LLEN', queue) == 0 then
    table.insert(answer, at, 0)
    return answer
  end
  redis.call('SET', lease, token, 'PX', lease_ms)
  table.insert(answer, at, 1)
  answer[#answer + 1] = token
  local batch = redis.call('LRANGE', queue, 0, batch_size - 1)
  for i = 1, #batch do
    answer[#answer + 1] = batch[i]
  end
  return answer
end
local rescuer = 'r:' .. time[1] .. ':' .. time[2] .. ':' .. user

-- Hands `handed` units to `buyer`: her purchase is queued with a new ticket. A second's sequence
-- key that is new, or was lost in a Redis restart, starts from the time within the
-- second (256 per ms) rather than 1, so that a restart does not hand out the numbers
-- used earlier in the same second. 2^18 a second: four times what one primary can admit.
-- Returns the ticket's sequence and queue entry, or nil when the second's are used up.
local function hand(buyer, handed)
  local sequence_key = KEYS[5] .. ':' .. seconds
  local n = redis.call('INCR', sequence_key)
  if n == 1 then
    n = (now % 1000) * 256 + 1
    redis.call('SET', sequence_key, n, 'EX', 60)
  end
  if n >= 262144 then
    return nil
  end
  local sequence = slot * 262144 + n
  local ticket = with_units(time[1] .. ':' .. sequence, handed)
  local entry = buyer .. ':' .. ticket
  redis.call('HINCRBY', voucher, 'stock', -handed)
  redis.call('HSET', buyers, buyer, QUEUED .. ticket)
  redis.call('RPUSH', queue, entry)
  redis.call('PEXPIREAT', buyers, expire_at)
  redis.call('PEXPIREAT', queue, expire_at)
  return sequence, entry
end

-- From draw_at on, units go to the draw's entrants in the order of their places.
local stock = tonumber(state.stock)
-- Entrants the hand-out did not come to, who may fit the units left.
local entrants_waiting = false
if lined then
  stock, entrants_waiting = hand_to_entrants(hand, lines, KEYS[11], buyers, metrics, voucher,
    stock, draw_batch, expire_at, now, line_hold_ms)
end

local record = redis.call('HGET', buyers, user)
-- The draw handed her a unit and she has not heard of it: this press is her purchase's
-- (a sale without a draw has no winners: its presses pay nothing for them).
local drawn = record and (draws or state.line_from) and redis.call('HDEL', KEYS[11], user) == 1
if drawn and kind_of(record) == ORDERED then
  return reply({'won', named_by(record), units_of(record)}, rescuer)
end
if record and (kind_of(record) == ORDERED or kind_of(record) == ELSEWHERE) then
  return reply({'already_ordered', named_by(record)}, rescuer)
end
-- One order per buyer per sale, whatever became of it: a cancelled or expired order's
-- unit went back to the sale, but not to her (restock.lua).
if record and kind_of(record) == CANCELLED then
  return reply({'cancelled', string.sub(record, 3)}, rescuer)
end
if record and kind_of(record) == EXPIRED then
  return reply({'expired', string.sub(record, 3)}, rescuer)
end
if record and kind_of(record) == QUEUED then
  local ticket = string.sub(record, 3)
  local place = named_by(record)
  local colon = string.find(place, ':', 1, true)
  local fields = {tonumber(string.sub(place, 1, colon - 1)), tonumber(string.sub(place, colon + 1)),
    units_of(ticket)}
  if drawn then
    return reply({'admitted', fields[1], fields[2], fields[3]}, user .. ':' .. ticket)
  end
  return reply({'queued', fields[1], fields[2], fields[3]}, rescuer)
end
if record and kind_of(record) == POINTED then
  return reply({'walked', string.sub(record, 3)}, rescuer)
end
local walks = record and kind_of(record) == WALKING and tonumber(string.sub(record, 3))
-- Sends her on one more walk, counted until it ends (walk_end.lua).
local function walk(answer)
  redis.call('HSET', buyers, user, WALKING .. ((walks or 0) + 1))
  redis.call('PEXPIREAT', buyers, expire_at)
  return reply(answer, rescuer)
end
if ended then
  if walks then
    return walk({'walk', 1, 0})
  end
  return reply({'ended'}, rescuer)
end
-- What a buyer in line needs beside her place to judge her wait: how many wait, and the
-- units given back since the line opened, how long ago, and the payment window. A draw's
-- line opened at draw_at, before any unit could come back. Read here only: the sold-out
-- flood reads none of it.
local function line_figures()
  local returned = tonumber(redis.call('HGET', metrics, 'units:returned') or '0')
  local sale = hash_fields(voucher, {'line_base', 'pay_within_s'})
  return line_length(lines), returned - tonumber(sale.line_base or '0'),
    now - tonumber(state.line_from or draw_at), tonumber(sale.pay_within_s or '900')
end
-- Her place in the line she waits in for `asked` units, as she hears it.
local function waitlisted(asked)
  return reply({'waitlisted', place_in_line(lines, user, asked), line_figures()}, rescuer)
end
-- Joins her to the line: the first join opens it, and her place is drawn within its first
-- moments, else the back's. A join opens it again where Redis lost its opening (part of
-- the sale's hash), and one already in it keeps her place.
local function join()
  if not state.line_from then
    state.line_from = draws and draw_at or now
    redis.call('HSET', voucher, 'line_from', state.line_from, 'line_base',
      redis.call('HGET', metrics, 'units:returned') or '0')
  end
  local asked = line_of(lines, user)
  if asked then
    return waitlisted(asked)
  end
  local place = draw_place
  if draws or now >= tonumber(state.line_from) + line_window_ms then
    place = string.format('%.0f', LATE + redis.call('HINCRBY', voucher, 'line_seq', 1))
  end
  redis.call('ZADD', lines[units], place, user)
  redis.call('PEXPIREAT', lines[units], expire_at)
  redis.call('HINCRBY', metrics, 'line:joined', 1)
  return waitlisted(units)
end
-- A first-come sale's sold-out flood pays nothing for its line: a buyer in it learns her
-- place by a look or a join.
if lined and (draws or line ~= 'press' or stock > 0) then
  local asked = line_of(lines, user)
  if asked and stock >= asked and draws and line ~= 'look' then
    return reply({'in_draw', draw_at, now}, rescuer)
  elseif asked then
    return waitlisted(asked)
  elseif entrants_waiting and line == 'join' then
    return join()
  elseif entrants_waiting and line == 'press' then
    -- Entrants come first, and this press handed out all it may: later presses go on.
    return reply({'throttled'}, rescuer)
  end
end
-- A look never takes units. It runs the sweep it took, and drains what its hand-out
-- queued, as a press does.
if line == 'look' then
  return reply({'not_in_line', line_length(lines)}, rescuer)
end
-- A bucket of a sale in buckets with too few units for her sends her on, as a sold-out
-- one does, but notes no sighting: it is not sold out.
local short = stock > 0 and stock < units
if short and (state.buckets or state.sale) and route ~= 'unrouted' then
  if walks then
    return walk({'walk', 0, stock})
  end
  if route == 'home' then
    return walk({'bucket_out', '', stock})
  end
  return reply({'bucket_out', '', stock}, rescuer)
end
if (short or stock <= 0) and line == 'join' then
  return join()
end
if short then
  return reply({'short', stock}, rescuer)
end
if stock <= 0 then
  local known = ''
  local marked = route ~= 'unrouted' and marked_all_out(KEYS[10])
  if buckets > 1 and route ~= 'unrouted' and not marked then
    known = note_sold_out(KEYS[12], KEYS[10], buckets, here, sightings, sighting_ms,
      all_out_ms, now)
  end
  if walks then
    return walk({'walk', 0, 0})
  end
  -- A mark this very press set (its walk's sightings completed the sale's) ends no walk:
  -- the walk goes on to its end and marks every bucket, as one that saw them all does. A
  -- mark that ends a walk hands it the mark's sightings' age, which the marks the walk
  -- leaves keep (records.lua), so that no mark outlives what it rests on.
  if route == 'lone_walk' and marked then
    return reply({'sold_out', here .. ':' .. marked}, rescuer)
  end
  if route == 'walk' or route == 'lone_walk' then
    return reply({'bucket_out', known, 0}, rescuer)
  end
  -- A sale of one bucket has no mark to read.
  marked = (state.buckets or state.sale) and marked_all_out(KEYS[10])
  if (state.buckets or state.sale) and not marked then
    if route == 'home' then
      return walk({'bucket_out', known, 0})
    end
    return reply({'bucket_out', known, 0}, rescuer)
  end
  return reply({'sold_out', marked and here .. ':' .. marked or ''}, rescuer)
end
if redis.call('LLEN', queue) >= max_queued then
  return reply({'throttled'}, rescuer)
end

local sequence, entry = hand(user, units)
if not sequence then
  return redis.error_reply('ERR seckill: the slot\'s order sequence of this second is used up')
end
return reply({'admitted', seconds, sequence, units}, entry)
