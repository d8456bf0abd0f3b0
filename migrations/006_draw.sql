-- An opening draw (docs/design.md, "The opening draw"): a sale with `draw_ms` > 0 takes
-- the presses of its first draw_ms milliseconds as entries in a draw, and picks its
-- winners at random when the window closes. 0, every sale before it: first come, first
-- served.
-- Idempotent: safe to apply again.

DELIMITER //

DROP PROCEDURE IF EXISTS seckill_add_draw //
CREATE PROCEDURE seckill_add_draw()
BEGIN
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = DATABASE() AND table_name = 'tb_seckill_voucher'
                    AND column_name = 'draw_ms') THEN
    ALTER TABLE tb_seckill_voucher ADD COLUMN draw_ms INT UNSIGNED NOT NULL DEFAULT 0;
  END IF;
END //

DELIMITER ;

CALL seckill_add_draw();
DROP PROCEDURE seckill_add_draw;
