-- Each voucher counts its orders, whatever became of them, so that a group commit reads
-- the count from the row it locks anyway instead of counting the orders table (which
-- grows with the sale). seckill_commit_batch keeps it.
-- Idempotent: safe to apply again. The count is taken from the orders once, when the
-- column is added; the statement that adds it blocks writes to the voucher table
-- meanwhile.

CALL seckill_add('tb_seckill_voucher', 'COLUMN', 'orders', 'BIGINT UNSIGNED NOT NULL DEFAULT 0');
UPDATE tb_seckill_voucher v
   SET v.orders = (SELECT COUNT(*) FROM tb_voucher_order o WHERE o.voucher_id = v.voucher_id)
 WHERE @seckill_added;
