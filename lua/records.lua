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

-- A bucket's all-out mark (admission.lua, "Buckets"): ALL_OUT while every bucket of the
-- sale is known sold out, so that its buyers hear sold_out at once; REOPENED for a moment
-- after units came back to another bucket of the sale (core/src/returns.rs), when what a
-- press or a walk saw of the buckets may be older than the units: nothing marks it then.
-- core/src/sale/walk_end.rs names REOPENED too.
local ALL_OUT = '1'
local REOPENED = 'r'

-- Whether the mark `mark` says every bucket of the sale is sold out.
local function marked_all_out(mark)
  return redis.call('GET', mark) == ALL_OUT
end

-- Marks `mark` all out for `ms`, unless the sale's buckets were reopened a moment ago.
-- Returns whether it is marked.
local function mark_all_out(mark, ms)
  if redis.call('GET', mark) == REOPENED then
    return false
  end
  redis.call('SET', mark, ALL_OUT, 'PX', ms)
  return true
end

-- Gives `units` back to the sale whose voucher hash is `voucher` (fewer than none: takes
-- units MySQL took that Redis never charged), while Redis holds the sale. A unit given
-- back clears the bucket's all-out mark `all_out` (admission.lua), so that its buyers buy
-- it at once.
local function give_back(voucher, all_out, units)
  if units ~= 0 and redis.call('HEXISTS', voucher, 'stock') == 1 then
    redis.call('HINCRBY', voucher, 'stock', units)
    if units > 0 then
      redis.call('DEL', all_out)
    end
  end
end
