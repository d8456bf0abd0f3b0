-- Changing a sale (docs/design.md, "Changing a sale"): its terms carry a version, which
-- every change and every end moves on, so that a change read before another one, or
-- before an end, writes nothing (seckill_change_sale) and Redis never installs older
-- terms over newer ones (lua/change.lua, lua/load.lua). A restock's units travel as an
-- event of the bucket it adds them to, sale.restocked (type 5), whose `units` says how
-- many; restock.lua gives them to the live sale once, by the same mark as the units of
-- cancelled and expired orders. A change of the terms is a sale.changed event (type 6).
-- Neither names an order or a buyer (0).
-- Idempotent: safe to apply again.

CALL seckill_add('tb_seckill_voucher', 'COLUMN', 'terms_version',
                 'INT UNSIGNED NOT NULL DEFAULT 0');
CALL seckill_add('tb_order_event', 'COLUMN', 'units', 'INT UNSIGNED NULL DEFAULT NULL');
