-- The feed's order without a lock every writer shares. An event's `id` is an
-- AUTO_INCREMENT, taken when it is written: the writers of one voucher's events hold its
-- stock row until they commit, so one voucher's ids are in commit order (which the
-- returns' mark in Redis relies on), while two vouchers' writers no longer wait for each
-- other. Its place in the feed, `seq` (the cursor consumers see), is given by a read of
-- the feed to the events committed by then, in one transaction that holds the sequence
-- row (seckill_feed_page): a reader past position n never misses one below n, and only
-- readers take that row.
-- Idempotent: safe to apply again, and during a sale: the events written before are
-- given their id as position, under the sequence row, which the procedures this replaces
-- (999_procedures.sql is applied after this) take before writing one.

DELIMITER //

DROP PROCEDURE IF EXISTS seckill_feed_positions //
CREATE PROCEDURE seckill_feed_positions()
BEGIN
  IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                  WHERE table_schema = DATABASE() AND table_name = 'tb_order_event'
                    AND column_name = 'seq') THEN
    ALTER TABLE tb_order_event
      MODIFY id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
      ADD COLUMN seq BIGINT UNSIGNED NULL,
      ADD UNIQUE KEY idx_event_seq (seq);
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT next INTO @seckill_next FROM tb_event_seq WHERE id = 1 FOR UPDATE;
    UPDATE tb_order_event SET seq = id WHERE seq IS NULL;
    UPDATE tb_event_seq SET next = GREATEST(next, (SELECT COALESCE(MAX(id), 0) + 1
                                                     FROM tb_order_event))
     WHERE id = 1;
    COMMIT;
  END IF;
END //

DELIMITER ;

CALL seckill_feed_positions();
DROP PROCEDURE seckill_feed_positions;
