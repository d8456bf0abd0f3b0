-- Each voucher counts its orders, whatever became of them, so that a group commit reads
-- the count from the row it locks anyway instead of counting the orders table (which
-- grows with the sale). seckill_commit_batch keeps it.
-- Idempotent: safe to apply again. The count is taken from the orders once, in the
-- statement that adds the column, which blocks writes to the voucher table meanwhile.

DELIMITER //

DROP PROCEDURE IF EXISTS seckill_add_order_count //
CREATE PROCEDURE seckill_add_order_count()
BEGIN
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = DATABASE() AND table_name = 'tb_seckill_voucher'
                    AND column_name = 'orders') THEN
    ALTER TABLE tb_seckill_voucher ADD COLUMN orders BIGINT UNSIGNED NOT NULL DEFAULT 0;
    UPDATE tb_seckill_voucher v
       SET v.orders = (SELECT COUNT(*) FROM tb_voucher_order o WHERE o.voucher_id = v.voucher_id);
  END IF;
END //

DELIMITER ;

CALL seckill_add_order_count();
DROP PROCEDURE seckill_add_order_count;
