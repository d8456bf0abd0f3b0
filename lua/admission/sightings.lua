-- admission/sightings.lua: what a sold-out bucket knows of the sale's other buckets, for
-- admission.lua (core/build.rs puts it before that script; see its "Buckets").
--
-- This bucket, at place `here` among the sale's `buckets`, is sold out at `now` (unix
-- ms). Each place is taken at its newest sighting: this bucket's own, those it kept
-- (`seen_out`, a hash: place -> unix ms) and those the press's walk carried (`carried`,
-- "<place>:<ms>,..."). Those within the last `window` ms are kept in `seen_out`, and once
-- every bucket is among them, `all_out` is marked on them for `mark_ms` after the oldest
-- (unless reopened since: see records.lua): this bucket's buyers then hear sold_out at once. Returns the sightings
-- kept, as `carried` writes them, for the walk to carry on.
local function note_sold_out(seen_out, all_out, buckets, here, carried, window, mark_ms, now)
  local places = {}
  for place = 0, buckets - 1 do
    places[#places + 1] = place
  end
  local kept = hash_fields(seen_out, places)
  local newest = {}
  for _, place in ipairs(places) do
    newest[place] = tonumber(kept[place])
  end
  newest[here] = now
  for place, at in string.gmatch(carried, '(%d+):(%d+)') do
    place, at = tonumber(place), tonumber(at)
    if place < buckets and not (newest[place] and newest[place] >= at) then
      newest[place] = at
    end
  end
  local fields, fresh, oldest = {}, {}, now
  for place = 0, buckets - 1 do
    local at = newest[place]
    if at and now - at < window then
      fields[#fields + 1] = place
      fields[#fields + 1] = at
      fresh[#fresh + 1] = place .. ':' .. at
      oldest = math.min(oldest, at)
    end
  end
  redis.call('HSET', seen_out, unpack(fields))
  redis.call('PEXPIRE', seen_out, window)
  if #fresh == buckets then
    mark_all_out(all_out, oldest, now, mark_ms)
  end
  return table.concat(fresh, ',')
end

