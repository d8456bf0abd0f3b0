-- clear.lua: a voucher just created in MySQL takes its id over whole. MySQL hands an id
-- out again when it lost the voucher that had it (restored from an older backup, a
-- failover that lost its creation): whatever Redis still holds under the id is that
-- lost sale's (its window, its buyers and their records, its queue, line and counts), and
-- none of it may be taken for the new one's, nor healed into its stock row. The creation
-- runs this before it installs each bucket (load.lua).
--
-- KEYS     every key of the voucher's own slot tag that holds its sale: the voucher,
--          buyers, queue, lease, sweep, entrants, drawn, all-out, metrics and absent
--          keys (core/src/sale/clear.rs lists them)
--
-- The outcome lists of queued purchases ("done:<entry>") are left: they expire within a
-- minute and are named by tickets no other sale holds. Returns how many keys held state.

return redis.call('DEL', unpack(KEYS))
