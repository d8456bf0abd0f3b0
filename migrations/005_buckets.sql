-- A hot voucher's stock split into buckets (docs/design.md, "Buckets"): each bucket is a
-- sale row of its own (a voucher id, so that its Redis keys sit in a slot of their own and
-- every mechanism of one voucher's stock holds per bucket), and `sale_id` names the
-- voucher the storefront sells, whose row is the first bucket. An order carries its
-- sale's id, so that one order per buyer holds across the buckets of a sale.
-- Idempotent: safe to apply again. An existing voucher is a sale of one bucket.

DELIMITER //

DROP PROCEDURE IF EXISTS seckill_add_buckets //
CREATE PROCEDURE seckill_add_buckets()
BEGIN
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = DATABASE() AND table_name = 'tb_seckill_voucher'
                    AND column_name = 'sale_id') THEN
    ALTER TABLE tb_seckill_voucher
      ADD COLUMN sale_id BIGINT UNSIGNED NOT NULL DEFAULT 0,
      ADD KEY idx_sale (sale_id);
  END IF;
  UPDATE tb_seckill_voucher SET sale_id = voucher_id WHERE sale_id = 0;
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = DATABASE() AND table_name = 'tb_voucher_order'
                    AND column_name = 'sale_id') THEN
    ALTER TABLE tb_voucher_order
      ADD COLUMN sale_id BIGINT UNSIGNED NOT NULL DEFAULT 0,
      ADD KEY idx_sale_order (sale_id, id);
  END IF;
  UPDATE tb_voucher_order SET sale_id = voucher_id WHERE sale_id = 0;
  IF NOT EXISTS (SELECT 1 FROM information_schema.statistics
                  WHERE table_schema = DATABASE() AND table_name = 'tb_voucher_order'
                    AND index_name = 'uk_user_sale') THEN
    -- The last line of defence for one order per buyer in a sale of several buckets.
    ALTER TABLE tb_voucher_order ADD UNIQUE KEY uk_user_sale (user_id, sale_id);
  END IF;
END //

DELIMITER ;

CALL seckill_add_buckets();
DROP PROCEDURE seckill_add_buckets;
