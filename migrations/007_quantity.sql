-- More than one unit per buyer (docs/design.md, "Quantities"): a sale's limit on the units
-- one buyer may hold, and each order's units. One order per buyer per sale stays the
-- rule: an order carries its quantity. Every sale before it sold one unit a buyer.
-- Idempotent: safe to apply again.

CALL seckill_add('tb_seckill_voucher', 'COLUMN', 'per_buyer', 'INT UNSIGNED NOT NULL DEFAULT 1');
CALL seckill_add('tb_voucher_order', 'COLUMN', 'quantity', 'INT UNSIGNED NOT NULL DEFAULT 1');
