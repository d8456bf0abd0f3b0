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

-- One try of a purchase; seckill_purchase retries it. Outcome rows as seckill_purchase's.
DROP PROCEDURE IF EXISTS seckill_purchase_once //
CREATE PROCEDURE seckill_purchase_once(
  IN p_order_id   BIGINT UNSIGNED,
  IN p_user_id    BIGINT UNSIGNED,
  IN p_voucher_id BIGINT UNSIGNED
)
BEGIN
  DECLARE EXIT HANDLER FOR 1062 -- ER_DUP_ENTRY: the buyer's order, or the order id, exists
  BEGIN
    ROLLBACK;
    SELECT IF(COUNT(*) = 0, 'id_taken', 'already_ordered') AS outcome, MAX(id) AS order_id
      FROM tb_voucher_order
     WHERE user_id = p_user_id AND voucher_id = p_voucher_id;
  END;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;

  START TRANSACTION;
  -- The order row first: a duplicate fails here, before the hot stock row is locked.
  INSERT INTO tb_voucher_order (id, user_id, voucher_id, status, create_time)
    VALUES (p_order_id, p_user_id, p_voucher_id, 1, UTC_TIMESTAMP());
  UPDATE tb_seckill_voucher
     SET stock = stock - 1
   WHERE voucher_id = p_voucher_id AND stock > 0;
  IF ROW_COUNT() = 0 THEN
    ROLLBACK;
    SELECT 'sold_out' AS outcome, NULL AS order_id;
  ELSE
    COMMIT;
    SELECT 'ordered' AS outcome, p_order_id AS order_id;
  END IF;
END //

-- Outcome rows: ('ordered', order id) | ('already_ordered', the buyer's existing order id)
--             | ('sold_out', NULL) | ('id_taken', NULL) when the order id collides.
-- A deadlock (1213) or lock wait timeout (1205) rolls the try back whole, so it is tried
-- again, with the same order id, up to three times: attempts of one buyer that meet on
-- her unique key deadlock as a matter of course.
DROP PROCEDURE IF EXISTS seckill_purchase //
CREATE PROCEDURE seckill_purchase(
  IN p_order_id   BIGINT UNSIGNED,
  IN p_user_id    BIGINT UNSIGNED,
  IN p_voucher_id BIGINT UNSIGNED
)
BEGIN
  DECLARE v_tries INT DEFAULT 0;
  tries: LOOP
    SET v_tries = v_tries + 1;
    BEGIN
      DECLARE EXIT HANDLER FOR 1213, 1205
      BEGIN
        IF v_tries >= 3 THEN
          RESIGNAL;
        END IF;
      END;
      CALL seckill_purchase_once(p_order_id, p_user_id, p_voucher_id);
      LEAVE tries;
    END;
  END LOOP;
END //

DELIMITER ;
