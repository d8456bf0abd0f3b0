-- walk_end.lua: the end of a buyer's walk round a sale's buckets (docs/design.md,
-- "Buckets"), kept at her home bucket, so that her later presses find her purchase there
-- whatever its marks or the sale's end say (admission.lua's "w:" records).
--
-- Found her record in another bucket: her home's record points there ("w:<bucket>"),
-- unless it holds a record of its own (an order of hers here wins).
--
-- Found none, every bucket being sold out, ended, or short of the units she asked for:
-- the walk uncounts itself from the
-- walks under way ("p:<n>"), or clears the pointer it followed (unless another press of
-- hers pointed it elsewhere since): a walk of hers still under way may yet find her a
-- unit, and her home must keep sending her presses round until it ends. Her bucket
-- answers sold_out by itself for a moment, so that the sold-out flood costs one script a
-- press instead of one per bucket; only when the walk found every bucket empty (empty),
-- never when one had units, fewer than she asked for, and only while that bucket is
-- still sold out: a unit
-- given back to it since the press found it empty (restock.lua clears the mark) is sold
-- to its buyers at once.
--
-- A walk that found every bucket empty (not stopped by a mark) also marks each other
-- bucket of the sale through this script, with no buyer (user ""): only the mark, so
-- that one walk a moment spares every bucket's sold-out crowd its walks, rather than
-- each bucket's crowd walking until one of its own walks ends.
--
-- KEYS[1]  seckill:{<home>}:voucher  hash: stock, end_ms
-- KEYS[2]  seckill:{<home>}:buyers   hash: user id -> record ("w:<bucket>" | "p:<n>" | ...)
-- KEYS[3]  seckill:{<home>}:all-out  string: the mark
-- ARGV[1]  user     user id, or "" (with found and started ""): only mark this bucket,
--                   unless it is marked already ("marked_before": another walk is marking
--                   them)
-- ARGV[2]  found    the bucket holding her record (a canonical decimal), or "" when none
--                   did
-- ARGV[3]  started  how the walk started at home: "counted" (admission counted it in
--                   "p:<n>"), "w:<bucket>" (it followed that pointer), or "" (neither)
-- ARGV[4]  mark_ms  how long a mark lasts after the oldest sighting it rests on,
--                   milliseconds
-- ARGV[5]  keep_ms  how long the buyers hash outlives the sale's end when this script
--                   creates it, milliseconds
-- ARGV[6]  empty    1 when the walk found no unit in any bucket (or no buyer: only the
--                   mark), 0 when a bucket had units, fewer than she asked for: nothing is
--                   marked
-- ARGV[7]  since    when the oldest sighting the walk rests on was made (unix ms): its
--                   first bucket's, or one a bucket passed on, or the mark that ended it
--                   (records.lua)
--
-- Returns "pointed" (found one), or, when the walk found none: "home" when her home
-- holds a record of hers after all (another press of hers was handed a unit given back
-- while this one walked, there or in a bucket its pointer now names: the caller asks
-- it), else "marked" when it is marked all out, or "open" when it has a unit again (or
-- the walk saw units left: empty 0; or units came back to another bucket since the walk's
-- oldest sighting, records.lua's REOPENED; or that sighting is older than a mark lasts).

local voucher, buyers, mark = KEYS[1], KEYS[2], KEYS[3]
local user, found, started, mark_ms, keep_ms, empty, since =
  ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local record = redis.call('HGET', buyers, user)

if found ~= '' then
  local kind = kind_of(record)
  if not record or kind == POINTED or kind == WALKING then
    redis.call('HSET', buyers, user, POINTED .. found)
    if redis.call('PTTL', buyers) == -1 then
      local time = redis.call('TIME')
      local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
      local end_ms = tonumber(redis.call('HGET', voucher, 'end_ms') or '') or now
      redis.call('PEXPIREAT', buyers, math.max(end_ms, now) + keep_ms)
    end
  end
  return 'pointed'
end

if started == 'counted' and record and kind_of(record) == WALKING then
  local walks = tonumber(string.sub(record, 3)) - 1
  if walks > 0 then
    redis.call('HSET', buyers, user, WALKING .. walks)
  else
    redis.call('HDEL', buyers, user)
  end
elseif started ~= '' and record == started then
  redis.call('HDEL', buyers, user)
end
record = redis.call('HGET', buyers, user)
if record and kind_of(record) ~= WALKING then
  return 'home'
end
local stock = tonumber(redis.call('HGET', voucher, 'stock') or '')
if not stock or stock > 0 or empty ~= '1' then
  return 'open'
end
if user == '' and marked_all_out(mark) then
  return 'marked_before'
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if not mark_all_out(mark, since, now, mark_ms) then
  return 'open'
end
return 'marked'
