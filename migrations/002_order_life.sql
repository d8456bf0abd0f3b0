-- The order's life after the group commit: how long a buyer has to pay, the orders'
-- deadlines and the feed of every change of an order (an outbox, written in the same
-- transaction as the change; the procedures that write it are in 999_procedures.sql).
-- Idempotent: safe to apply again.

-- Seconds a winner has to pay before her order expires and its unit goes back.
CALL seckill_add('tb_seckill_voucher', 'COLUMN', 'pay_within_s',
                 'INT UNSIGNED NOT NULL DEFAULT 900');
-- When an unpaid order expires.
CALL seckill_add('tb_voucher_order', 'COLUMN', 'expire_time',
                 'DATETIME NOT NULL DEFAULT ''1970-01-01 00:00:00''');

-- Every change of an order, oldest first. 004_feed_positions.sql makes `id` an
-- AUTO_INCREMENT and gives each event its place in the feed, `seq`, the feed's cursor;
-- tb_event_seq hands out those places.
-- type: 1 order.created, 2 order.paid, 3 order.cancelled, 4 order.expired
CREATE TABLE IF NOT EXISTS tb_order_event (
  id         BIGINT UNSIGNED  NOT NULL,
  type       TINYINT UNSIGNED NOT NULL,
  order_id   BIGINT UNSIGNED  NOT NULL,
  voucher_id BIGINT UNSIGNED  NOT NULL,
  user_id    BIGINT UNSIGNED  NOT NULL,
  at         DATETIME         NOT NULL,
  PRIMARY KEY (id),
  KEY idx_event_voucher (voucher_id, type, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS tb_event_seq (
  id   TINYINT UNSIGNED NOT NULL,
  next BIGINT UNSIGNED  NOT NULL,
  PRIMARY KEY (id)
) ENGINE = InnoDB;
INSERT IGNORE INTO tb_event_seq (id, next) VALUES (1, 1);

-- An order's events by order: without it the backfill below reads every event for every
-- order on each run of the migrations.
CALL seckill_add('tb_order_event', 'INDEX', 'idx_event_order', '(order_id, type)');
-- Orders unpaid past their deadline, whatever their voucher: the feed's reads find the
-- sales whose sweep is due by it, so that an order expires with nobody pressing.
CALL seckill_add('tb_voucher_order', 'INDEX', 'idx_order_due', '(status, expire_time)');

-- One row the feed changes after each page it serves: InnoDB shows a commit to readers
-- before its redo log is on disk, and that write's commit flushes the log past every
-- event the page held (docs/design.md, "The feed across a crash").
CREATE TABLE IF NOT EXISTS tb_feed_read (
  id    TINYINT UNSIGNED NOT NULL,
  pages BIGINT UNSIGNED  NOT NULL,
  PRIMARY KEY (id)
) ENGINE = InnoDB;
INSERT IGNORE INTO tb_feed_read (id, pages) VALUES (1, 0);

-- Orders committed before the feed existed are in it too, as created, in id order. Only
-- when some order has no such event (a database from before the feed), found by a read
-- that locks nothing; then in one transaction that holds the sequence row, as every
-- writer of the feed does, so that a sale running meanwhile neither takes these ids nor
-- commits an event below them; under READ COMMITTED, so that the orders it reads are not
-- locked against the sale's writes.
DELIMITER //
DROP PROCEDURE IF EXISTS seckill_backfill_events //
CREATE PROCEDURE seckill_backfill_events()
BEGIN
  DECLARE v_next BIGINT UNSIGNED;
  DECLARE event_created TINYINT UNSIGNED DEFAULT 1;
  IF EXISTS (SELECT 1 FROM tb_voucher_order o
              WHERE NOT EXISTS (SELECT 1 FROM tb_order_event e
                                 WHERE e.order_id = o.id AND e.type = event_created)) THEN
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT next INTO v_next FROM tb_event_seq WHERE id = 1 FOR UPDATE;
    SET v_next = GREATEST(v_next, (SELECT COALESCE(MAX(id), 0) + 1 FROM tb_order_event));
    INSERT INTO tb_order_event (id, type, order_id, voucher_id, user_id, at)
      SELECT v_next + ROW_NUMBER() OVER (ORDER BY o.id) - 1, event_created, o.id, o.voucher_id,
             o.user_id, o.create_time
        FROM tb_voucher_order o
       WHERE NOT EXISTS (SELECT 1 FROM tb_order_event e
                          WHERE e.order_id = o.id AND e.type = event_created);
    UPDATE tb_event_seq SET next = (SELECT COALESCE(MAX(id), 0) + 1 FROM tb_order_event)
     WHERE id = 1 AND next <= (SELECT COALESCE(MAX(id), 0) FROM tb_order_event);
    COMMIT;
  END IF;
END //
DELIMITER ;
CALL seckill_backfill_events();
DROP PROCEDURE seckill_backfill_events;
