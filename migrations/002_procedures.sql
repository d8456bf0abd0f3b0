-- Stored procedures for the writes that must be atomic. Spin's MySQL API sends every
-- statement through the prepared-statement protocol, which cannot carry
-- START TRANSACTION, and opens a new connection per request; one CALL makes each write
-- a single round trip that commits or rolls back whole, and keeps the hot stock row
-- locked only between the UPDATE and the COMMIT, inside the server.
-- Idempotent: safe to apply again.

DELIMITER //

DROP PROCEDURE IF EXISTS seckill_create_voucher //
CREATE PROCEDURE seckill_create_voucher(
  IN p_title       VARCHAR(128),
  IN p_description VARCHAR(1024),
  IN p_stock       INT UNSIGNED,
  IN p_begin       DATETIME,
  IN p_end         DATETIME
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
  INSERT INTO tb_seckill_voucher (voucher_id, initial_stock, stock, begin_time, end_time)
    VALUES (v_id, p_stock, p_stock, p_begin, p_end);
  COMMIT;
  SELECT v_id AS voucher_id;
END //

-- The per-purchase procedures of the path before group commits.
DROP PROCEDURE IF EXISTS seckill_purchase //
DROP PROCEDURE IF EXISTS seckill_purchase_once //

-- One try of a group commit; seckill_commit_batch retries it.
DROP PROCEDURE IF EXISTS seckill_commit_batch_once //
CREATE PROCEDURE seckill_commit_batch_once(
  IN p_voucher_id BIGINT UNSIGNED,
  IN p_batch      MEDIUMTEXT
)
BEGIN
  DECLARE v_stock  BIGINT UNSIGNED;
  DECLARE v_initial BIGINT UNSIGNED;
  DECLARE v_taken  BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_i      INT DEFAULT 0;
  DECLARE v_n      INT DEFAULT JSON_LENGTH(p_batch);
  DECLARE v_order  BIGINT UNSIGNED;
  DECLARE v_user   BIGINT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;

  -- A batch waits on the stock row only while another batch of the voucher commits,
  -- milliseconds; a longer wait is a drainer stuck in MySQL, and this one gives up well
  -- within its lease (2 s) rather than pile up behind it.
  SET SESSION innodb_lock_wait_timeout = 1;
  -- READ COMMITTED: the existence checks below read what is committed without locking
  -- gaps, so batches of different vouchers, whose time-ordered ids all land at the top
  -- of the primary key, do not deadlock on that gap.
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  -- Every batch of the voucher locks its stock row first, so batches of one voucher
  -- commit one at a time and each sees every order committed before it.
  SELECT IFNULL(MAX(stock), 0), IFNULL(MAX(initial_stock), 0) INTO v_stock, v_initial
    FROM tb_seckill_voucher WHERE voucher_id = p_voucher_id FOR UPDATE;
  WHILE v_i < v_n DO
    SET v_order = CAST(JSON_UNQUOTE(JSON_EXTRACT(p_batch, CONCAT('$[', v_i, '][0]'))) AS UNSIGNED);
    SET v_user = CAST(JSON_UNQUOTE(JSON_EXTRACT(p_batch, CONCAT('$[', v_i, '][1]'))) AS UNSIGNED);
    -- An order already there (a batch written again after its reply was lost, or by two
    -- drainers) is left as it is: each order is committed once.
    IF v_taken < v_stock
       AND NOT EXISTS (SELECT 1 FROM tb_voucher_order WHERE id = v_order)
       AND NOT EXISTS (SELECT 1 FROM tb_voucher_order
                        WHERE user_id = v_user AND voucher_id = p_voucher_id) THEN
      INSERT INTO tb_voucher_order (id, user_id, voucher_id, status, create_time)
        VALUES (v_order, v_user, p_voucher_id, 1, UTC_TIMESTAMP());
      SET v_taken = v_taken + 1;
    END IF;
    SET v_i = v_i + 1;
  END WHILE;
  UPDATE tb_seckill_voucher SET stock = stock - v_taken WHERE voucher_id = p_voucher_id;
  -- The voucher's orders as this transaction leaves them, for the caller's check that
  -- Redis has not fallen behind MySQL (see lua/publish.lua).
  SET @seckill_orders = v_initial - v_stock + v_taken;
  COMMIT;
END //

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

DELIMITER ;
