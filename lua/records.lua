-- records.lua: what every script starts with (core/build.rs puts it before each): the
-- records of a buyer in a sale's buyers hash, each named once by its prefix.
-- core/src/sale/entry.rs names those Rust reads and writes (`Record`), and a unit test
-- holds the two together.
local QUEUED = 'q:'     -- q:<ticket>: her purchase is queued, holding a unit
local ORDERED = 'o:'    -- o:<order id>: her order is committed
local ELSEWHERE = 'e:'  -- e:<order id>: her order of the sale is another bucket's
local CANCELLED = 'c:'  -- c:<order id>: her order was cancelled
local EXPIRED = 'x:'    -- x:<order id>: her order expired unpaid
local LOST = 'l:'       -- l:<order id>: MySQL lost her order and could not take it again
local POINTED = 'w:'    -- w:<bucket>: a walk of hers found her purchase in that bucket
local WALKING = 'p:'    -- p:<walks>: walks of hers under way round the sale's buckets

-- The prefix of a record (nil for none).
local function kind_of(record)
  return record and string.sub(record, 1, 2)
end

