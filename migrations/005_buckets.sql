-- A hot voucher's stock split into buckets (docs/design.md, "Buckets"): each bucket is a
-- sale row of its own (a voucher id, so that its Redis keys sit in a slot of their own and
-- every mechanism of one voucher's stock holds per bucket), and `sale_id` names the
-- voucher the storefront sells, whose row is the first bucket. An order carries its
-- sale's id, so that one order per buyer holds across the buckets of a sale.
-- Idempotent: safe to apply again. An existing voucher is a sale of one bucket.

CALL seckill_add('tb_seckill_voucher', 'COLUMN', 'sale_id',
                 'BIGINT UNSIGNED NOT NULL DEFAULT 0, ADD KEY idx_sale (sale_id)');
UPDATE tb_seckill_voucher SET sale_id = voucher_id WHERE sale_id = 0;
CALL seckill_add('tb_voucher_order', 'COLUMN', 'sale_id',
                 'BIGINT UNSIGNED NOT NULL DEFAULT 0, ADD KEY idx_sale_order (sale_id, id)');
UPDATE tb_voucher_order SET sale_id = voucher_id WHERE sale_id = 0;
-- The last line of defence for one order per buyer in a sale of several buckets.
CALL seckill_add('tb_voucher_order', 'UNIQUE INDEX', 'uk_user_sale', '(user_id, sale_id)');
