-- records.lua: what every script starts with (core/build.rs puts it before each): the
-- records of a buyer in a sale's buyers hash, each named once by its prefix, the units a
-- record held going back to the sale, and how a script reads a hash's fields (by name).
-- core/src/sale/entry.rs names those Rust reads and writes (`Record`), and a unit test
-- holds the two together.
local QUEUED = 'q:'     -- q:<ticket>: her purchase is queued, holding its units
local ORDERED = 'o:'    -- o:<order id>[*<units>]: her order is committed
local ELSEWHERE = 'e:'  -- e:<order id>: her order of the sale is another bucket's
local CANCELLED = 'c:'  -- c:<order id>: her order was cancelled
local EXPIRED = 'x:'    -- x:<order id>: her order expired unpaid
local LOST = 'l:'       -- l:<order id>: MySQL lost her order and could not take it again
local POINTED = 'w:'    -- w:<bucket>: a walk of hers found her purchase in that bucket
local WALKING = 'p:'    -- p:<walks>: walks of hers under way round the sale's buckets

-- A ticket (so a queue entry and a "q:" record) and an "o:" record name the units of a
-- purchase of more than one after this, "*<units>"; one unit is named by nothing.
local UNITS = '*'

-- The fields `names` of the hash `key`, in one HMGET, by name: `fields.stock`; a field the
-- hash lacks is false, as HMGET reads it. Scripts read hashes through this alone, so that
-- none reads a field by its place in a list.
local function hash_fields(key, names)
  local values = redis.call('HMGET', key, unpack(names))
  local fields = {}
  for i, name in ipairs(names) do
    fields[name] = values[i]
  end
  return fields
end

-- The prefix of a record (nil for none).
local function kind_of(record)
  return record and string.sub(record, 1, 2)
end


-- The units a queue entry, ticket or record names.
local function units_of(text)
  local at = string.find(text, UNITS, 1, true)
  return at and tonumber(string.sub(text, at + 1)) or 1
end

-- `text` naming `units`.
local function with_units(text, units)
  if units > 1 then
    return text .. UNITS .. units
  end
  return text
end

-- What a record names after its prefix (an order id, a ticket), without its units.
local function named_by(record)
  local at = string.find(record, UNITS, 1, true)
  return string.sub(record, 3, at and at - 1 or -1)
end

-- A bucket's all-out mark (admission.lua, "Buckets"): ALL_OUT .. <since> while every
-- bucket of the sale is known sold out, so that its buyers hear sold_out at once, <since>
-- being when the oldest sighting behind it was made (unix ms, any bucket's clock): a mark
-- ends ALL_OUT_MS after it, however it was passed on. REOPENED .. <at> once units came back
-- to another bucket of the sale at <at> (reopen.lua): nothing seen before then marks it.
-- core/src/sale/walk_end.rs names both.
local ALL_OUT = 'a:'
local REOPENED = 'r:'

-- The <since> of the mark `mark` when it says every bucket of the sale is sold out, else nil.
local function marked_all_out(mark)
  local held = redis.call('GET', mark)
  if held and string.sub(held, 1, 2) == ALL_OUT then
    return tonumber(string.sub(held, 3))
  end
  return nil
end

-- Marks `mark` all out on sightings as old as `since`, until `life` ms after it, unless the
-- sale's buckets were reopened since then. Returns whether it is marked.
local function mark_all_out(mark, since, now, life)
  local held = redis.call('GET', mark)
  if held and string.sub(held, 1, 2) == REOPENED and since <= tonumber(string.sub(held, 3)) then
    return false
  end
  local kept = marked_all_out(mark)
  if kept and kept >= since then
    return true
  end
  local left = since + life - now
  if left <= 0 then
    return false
  end
  redis.call('SET', mark, ALL_OUT .. since, 'PX', left)
  return true
end

-- Clears the mark `mark` of a bucket given units back: its buyers buy them at once. A
-- reopening stays: it still tells what was seen before it from what may mark.
local function clear_all_out(mark)
  if marked_all_out(mark) then
    redis.call('DEL', mark)
  end
end

-- Gives `units` back to the sale whose voucher hash is `voucher` (fewer than none: takes
-- units MySQL took that Redis never charged), while Redis holds the sale. A unit given
-- back clears the bucket's all-out mark `all_out` (admission.lua), so that its buyers buy
-- it at once.
local function give_back(voucher, all_out, units)
  if units ~= 0 and redis.call('HEXISTS', voucher, 'stock') == 1 then
    redis.call('HINCRBY', voucher, 'stock', units)
    if units > 0 then
      clear_all_out(all_out)
    end
  end
end
