-- A voucher's generation (docs/design.md, "A voucher id handed out again"): a random
-- number drawn at its creation, which its Redis sale state carries too. MySQL hands a
-- voucher id out again when it lost the voucher (restored from an older backup, a
-- failover that lost its creation) while Redis may still hold the lost one's keys: the
-- generation tells them apart. 0, every voucher before it: its Redis state, written
-- without one, is taken for its own.
-- Idempotent: safe to apply again.

DELIMITER //

DROP PROCEDURE IF EXISTS seckill_add_generation //
CREATE PROCEDURE seckill_add_generation()
BEGIN
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = DATABASE() AND table_name = 'tb_seckill_voucher'
                    AND column_name = 'generation') THEN
    ALTER TABLE tb_seckill_voucher ADD COLUMN generation BIGINT UNSIGNED NOT NULL DEFAULT 0;
  END IF;
END //

DELIMITER ;

CALL seckill_add_generation();
DROP PROCEDURE seckill_add_generation;
