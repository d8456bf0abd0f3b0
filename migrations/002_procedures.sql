-- Stored procedures for the writes that must be atomic. Spin's MySQL API sends every
-- statement through the prepared-statement protocol, which cannot carry
-- START TRANSACTION, and opens a new connection per request; one CALL makes each write
-- a single round trip that commits or rolls back whole, and keeps the hot stock row
-- locked only between the UPDATE and the COMMIT, inside the server.
-- Idempotent: safe to apply again.

DELIMITER //

-- The per-purchase procedures of the path before group commits.
DROP PROCEDURE IF EXISTS seckill_purchase //
DROP PROCEDURE IF EXISTS seckill_purchase_once //

-- Commits a batch of queued purchases of one voucher in one transaction: an order row
-- for each while stock lasts, and the stock lowered once by their number.
-- p_batch: a JSON array of ["<order id>", "<user id>"], oldest first.
-- One row per entry, in batch order: (order id, the buyer's order of this voucher or
-- NULL, 1 when the order id is used by any order else 0). The entry was ordered when the
-- two ids are equal; the buyer holds another order when they differ; with no order of
-- hers, its id was taken by someone else's order when the flag is 1, else no unit was left.
-- Each row also carries the voucher's number of orders as the batch's transaction left it.
-- Written again, a batch changes nothing and reads the same.
-- A deadlock (1213) or an order id inserted meanwhile by another voucher's batch (1062)
-- rolls the try back whole, and it is tried up to three times; a lock wait timeout (1205,
-- after 1 s) is not retried.
DROP PROCEDURE IF EXISTS seckill_commit_batch //
CREATE PROCEDURE seckill_commit_batch(
  IN p_voucher_id BIGINT UNSIGNED,
  IN p_batch      MEDIUMTEXT
)
BEGIN
  DECLARE v_tries INT DEFAULT 0;
  tries: LOOP
    SET v_tries = v_tries + 1;
    BEGIN
      DECLARE EXIT HANDLER FOR 1213, 1062
      BEGIN
        IF v_tries >= 3 THEN
          RESIGNAL;
        END IF;
      END;
      CALL seckill_commit_batch_once(p_voucher_id, p_batch);
      LEAVE tries;
    END;
  END LOOP;
  SELECT CAST(b.order_id AS UNSIGNED) AS order_id,
         (SELECT o.id FROM tb_voucher_order o
           WHERE o.user_id = CAST(b.user_id AS UNSIGNED) AND o.voucher_id = p_voucher_id) AS held,
         EXISTS (SELECT 1 FROM tb_voucher_order o WHERE o.id = CAST(b.order_id AS UNSIGNED)) AS id_used,
         CAST(@seckill_orders AS UNSIGNED) AS orders
    FROM JSON_TABLE(p_batch, '$[*]' COLUMNS (
           n        FOR ORDINALITY,
           order_id VARCHAR(20) PATH '$[0]',
           user_id  VARCHAR(20) PATH '$[1]')) AS b
   ORDER BY b.n;
END //

-- Appends the events of the calling transaction, whose changes are in the temporary
-- table seckill_new_events (type, order_id, voucher_id, user_id), with ids from the
-- sequence row, locked until that transaction commits: ids follow commit order.
DROP PROCEDURE IF EXISTS seckill_append_events //
CREATE PROCEDURE seckill_append_events()
BEGIN
  DECLARE v_next BIGINT UNSIGNED;
  DECLARE v_n    BIGINT UNSIGNED;
  SELECT COUNT(*) INTO v_n FROM seckill_new_events;
  IF v_n > 0 THEN
    SELECT next INTO v_next FROM tb_event_seq WHERE id = 1 FOR UPDATE;
    INSERT INTO tb_order_event (id, type, order_id, voucher_id, user_id, at)
      SELECT v_next + ROW_NUMBER() OVER (ORDER BY n) - 1, type, order_id, voucher_id,
             user_id, UTC_TIMESTAMP()
        FROM seckill_new_events;
    UPDATE tb_event_seq SET next = v_next + v_n WHERE id = 1;
  END IF;
  DELETE FROM seckill_new_events;
END //


DROP PROCEDURE IF EXISTS seckill_new_events //
CREATE PROCEDURE seckill_new_events()
BEGIN
  CREATE TEMPORARY TABLE IF NOT EXISTS seckill_new_events (
    n          INT UNSIGNED     NOT NULL AUTO_INCREMENT PRIMARY KEY,
    type       TINYINT UNSIGNED NOT NULL,
    order_id   BIGINT UNSIGNED  NOT NULL,
    voucher_id BIGINT UNSIGNED  NOT NULL,
    user_id    BIGINT UNSIGNED  NOT NULL
  );
  DELETE FROM seckill_new_events;
END //

DROP PROCEDURE IF EXISTS seckill_create_voucher //
CREATE PROCEDURE seckill_create_voucher(
  IN p_title        VARCHAR(128),
  IN p_description  VARCHAR(1024),
  IN p_stock        INT UNSIGNED,
  IN p_begin        DATETIME,
  IN p_end          DATETIME,
  IN p_pay_within_s INT UNSIGNED
)
BEGIN
  DECLARE v_id BIGINT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;

  START TRANSACTION;
  INSERT INTO tb_voucher (title, description, create_time)
    VALUES (p_title, p_description, UTC_TIMESTAMP());
  SET v_id = LAST_INSERT_ID();
  INSERT INTO tb_seckill_voucher (voucher_id, initial_stock, stock, begin_time, end_time,
                                  pay_within_s)
    VALUES (v_id, p_stock, p_stock, p_begin, p_end, p_pay_within_s);
  COMMIT;
  SELECT v_id AS voucher_id;
END //

-- Moves one unpaid order on: to paid (p_to = 2) or cancelled (p_to = 4), for its buyer
-- p_user (0: anyone, the admin or the payment system). An unpaid order past its
-- deadline expires instead, whatever was asked: its unit goes back to the stock in the
-- same transaction. The voucher's stock row is locked before the order's, as the group
-- commit and the expiry lock them, so that none of them deadlock.
-- One row: (status after, 1 when this call changed it else 0, the voucher id), or none
-- when there is no such order (or it is another buyer's).
DROP PROCEDURE IF EXISTS seckill_settle_order //
CREATE PROCEDURE seckill_settle_order(
  IN p_order_id BIGINT UNSIGNED,
  IN p_user     BIGINT UNSIGNED,
  IN p_to       TINYINT UNSIGNED
)
BEGIN
  DECLARE v_voucher BIGINT UNSIGNED;
  DECLARE v_user    BIGINT UNSIGNED;
  DECLARE v_status  TINYINT UNSIGNED;
  DECLARE v_expired BOOLEAN;
  DECLARE v_changed INT DEFAULT 0;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;

  SET SESSION innodb_lock_wait_timeout = 1;
  -- Before SET TRANSACTION, which holds for the next transaction only: the events table's
  -- own statements would use it up.
  CALL seckill_new_events();
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT voucher_id INTO v_voucher FROM tb_voucher_order WHERE id = p_order_id;
  IF v_voucher IS NOT NULL THEN
    SELECT voucher_id INTO v_voucher FROM tb_seckill_voucher
     WHERE voucher_id = v_voucher FOR UPDATE;
    SELECT user_id, status, expire_time <= UTC_TIMESTAMP() INTO v_user, v_status, v_expired
      FROM tb_voucher_order WHERE id = p_order_id FOR UPDATE;
    IF p_user <> 0 AND v_user <> p_user THEN
      SET v_voucher = NULL;
    ELSEIF v_status = 1 AND v_expired THEN
      UPDATE tb_voucher_order SET status = 7 WHERE id = p_order_id;
      UPDATE tb_seckill_voucher SET stock = stock + 1 WHERE voucher_id = v_voucher;
      INSERT INTO seckill_new_events (type, order_id, voucher_id, user_id)
        VALUES (4, p_order_id, v_voucher, v_user);
      SET v_status = 7, v_changed = 1;
    ELSEIF v_status = 1 THEN
      UPDATE tb_voucher_order SET status = p_to WHERE id = p_order_id;
      IF p_to = 4 THEN
        UPDATE tb_seckill_voucher SET stock = stock + 1 WHERE voucher_id = v_voucher;
      END IF;
      INSERT INTO seckill_new_events (type, order_id, voucher_id, user_id)
        VALUES (IF(p_to = 2, 2, 3), p_order_id, v_voucher, v_user);
      SET v_status = p_to, v_changed = 1;
    END IF;
    CALL seckill_append_events();
  END IF;
  COMMIT;
  IF v_voucher IS NOT NULL THEN
    SELECT v_status AS status, v_changed AS changed, v_voucher AS voucher_id;
  END IF;
END //

-- Expires up to p_limit of the voucher's unpaid orders past their deadline, giving their
-- units back to the stock, in one transaction. One row per order expired (order id, user
-- id); then, in every row, the earliest deadline left among its unpaid orders as unix
-- seconds (NULL when none).
DROP PROCEDURE IF EXISTS seckill_expire_due //
CREATE PROCEDURE seckill_expire_due(
  IN p_voucher_id BIGINT UNSIGNED,
  IN p_limit      INT UNSIGNED
)
BEGIN
  DECLARE v_n INT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;

  SET SESSION innodb_lock_wait_timeout = 1;
  -- Before SET TRANSACTION, which holds for the next transaction only: the events table's
  -- own statements would use it up.
  CALL seckill_new_events();
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT voucher_id INTO @seckill_voucher FROM tb_seckill_voucher
   WHERE voucher_id = p_voucher_id FOR UPDATE;
  INSERT INTO seckill_new_events (type, order_id, voucher_id, user_id)
    SELECT 4, id, voucher_id, user_id FROM tb_voucher_order
     WHERE voucher_id = p_voucher_id AND status = 1 AND expire_time <= UTC_TIMESTAMP()
     ORDER BY id LIMIT p_limit FOR UPDATE;
  SELECT COUNT(*) INTO v_n FROM seckill_new_events;
  UPDATE tb_voucher_order SET status = 7
   WHERE id IN (SELECT order_id FROM seckill_new_events);
  UPDATE tb_seckill_voucher SET stock = stock + v_n WHERE voucher_id = p_voucher_id;
  CREATE TEMPORARY TABLE IF NOT EXISTS seckill_expired (order_id BIGINT UNSIGNED, user_id BIGINT UNSIGNED);
  DELETE FROM seckill_expired;
  INSERT INTO seckill_expired SELECT order_id, user_id FROM seckill_new_events;
  CALL seckill_append_events();
  COMMIT;
  SET @seckill_next = (SELECT TIMESTAMPDIFF(SECOND, '1970-01-01', MIN(expire_time))
                         FROM tb_voucher_order WHERE voucher_id = p_voucher_id AND status = 1);
  IF v_n > 0 THEN
    SELECT order_id, user_id, @seckill_next AS next_due FROM seckill_expired;
  ELSE
    SELECT NULL AS order_id, NULL AS user_id, @seckill_next AS next_due;
  END IF;
END //

-- One try of a group commit; seckill_commit_batch retries it. Each order gets its payment
-- deadline, and an order.created event in the same transaction.
DROP PROCEDURE IF EXISTS seckill_commit_batch_once //
CREATE PROCEDURE seckill_commit_batch_once(
  IN p_voucher_id BIGINT UNSIGNED,
  IN p_batch      MEDIUMTEXT
)
BEGIN
  DECLARE v_stock   BIGINT UNSIGNED;
  DECLARE v_initial BIGINT UNSIGNED;
  DECLARE v_pay_s   BIGINT UNSIGNED;
  DECLARE v_taken   BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_orders  BIGINT UNSIGNED;
  DECLARE v_i       INT DEFAULT 0;
  DECLARE v_n       INT DEFAULT JSON_LENGTH(p_batch);
  DECLARE v_order   BIGINT UNSIGNED;
  DECLARE v_user    BIGINT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;

  SET SESSION innodb_lock_wait_timeout = 1;
  -- Before SET TRANSACTION, which holds for the next transaction only: the events table's
  -- own statements would use it up.
  CALL seckill_new_events();
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT IFNULL(MAX(stock), 0), IFNULL(MAX(initial_stock), 0), IFNULL(MAX(pay_within_s), 900)
    INTO v_stock, v_initial, v_pay_s
    FROM tb_seckill_voucher WHERE voucher_id = p_voucher_id FOR UPDATE;
  -- The voucher's orders before the batch, whatever became of them: Redis counts those
  -- it learnt of alike (publish.lua), and a cancellation between the commit and the
  -- publication changes neither count.
  SELECT COUNT(*) INTO v_orders FROM tb_voucher_order WHERE voucher_id = p_voucher_id;
  WHILE v_i < v_n DO
    SET v_order = CAST(JSON_UNQUOTE(JSON_EXTRACT(p_batch, CONCAT('$[', v_i, '][0]'))) AS UNSIGNED);
    SET v_user = CAST(JSON_UNQUOTE(JSON_EXTRACT(p_batch, CONCAT('$[', v_i, '][1]'))) AS UNSIGNED);
    IF v_taken < v_stock
       AND NOT EXISTS (SELECT 1 FROM tb_voucher_order WHERE id = v_order)
       AND NOT EXISTS (SELECT 1 FROM tb_voucher_order
                        WHERE user_id = v_user AND voucher_id = p_voucher_id) THEN
      INSERT INTO tb_voucher_order (id, user_id, voucher_id, status, create_time, expire_time)
        VALUES (v_order, v_user, p_voucher_id, 1, UTC_TIMESTAMP(),
                UTC_TIMESTAMP() + INTERVAL v_pay_s SECOND);
      INSERT INTO seckill_new_events (type, order_id, voucher_id, user_id)
        VALUES (1, v_order, p_voucher_id, v_user);
      SET v_taken = v_taken + 1;
    END IF;
    SET v_i = v_i + 1;
  END WHILE;
  UPDATE tb_seckill_voucher SET stock = stock - v_taken WHERE voucher_id = p_voucher_id;
  SET @seckill_orders = v_orders + v_taken;
  CALL seckill_append_events();
  COMMIT;
END //

DELIMITER ;
