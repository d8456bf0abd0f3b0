-- Stored procedures for the writes that must be atomic. Spin's MySQL API sends every
-- statement through the prepared-statement protocol, which cannot carry
-- START TRANSACTION, and opens a new connection per request; one CALL makes each write
-- a single round trip that commits or rolls back whole, and keeps the hot stock row
-- locked only between the UPDATE and the COMMIT, inside the server.
-- Idempotent: safe to apply again. Applied last (scripts/migrate.sh applies the files in
-- name order), so that a procedure is replaced only once the columns it uses exist: a
-- migration run during a sale never leaves a procedure that fails.

-- Every text parameter and variable names its character set: a routine's text takes the
-- database's default otherwise, and a database created latin1 (a server started without
-- Debian's configuration, a managed MySQL) would refuse a title such as "秒杀".
--
-- An order's status and an event's type are named in each procedure that uses them, as
-- constants declared first (`status_<name>`, `event_<name>`): SQL has no constants of its
-- own, and a stored function would cost each of Spin's fresh connections a parse. The
-- names and codes are core/src/sql.rs's `Status` and `EventType`, and a unit test there
-- holds every declaration here against them.

DELIMITER //

-- The per-purchase procedures of the path before group commits.
DROP PROCEDURE IF EXISTS seckill_purchase //
DROP PROCEDURE IF EXISTS seckill_purchase_once //

-- Commits a batch of queued purchases of one voucher in one transaction: an order row
-- for each whose units are left, each with its payment deadline and an order.created
-- event, and the stock lowered once by their units.
-- p_batch: a JSON array of ["<order id>", "<user id>", <units>], oldest first (units left
-- out: one); an entry takes all its units or none.
-- Returns one row: `verdicts`, a JSON array of {"outcome": <verdict>, "order": "<order
-- id>", "units": <the units of that order>}, one per entry in batch order
-- (core/src/verdict.rs, `Told`), the verdict about the buyer's order of this voucher's
-- sale (any of its buckets) when she has one, else the entry's:
--   ordered    the entry's order is committed here (its own id)
--   duplicate  she holds this other order of this bucket
--   elsewhere  she holds this order of another bucket (even one with the entry's id:
--              a heal hands over the id her record names)
--   cancelled, expired  her order of another bucket is dead: she holds none, and may
--              not buy again in the sale
--   id_taken   with no order of hers, the entry's id is another order's
--   short      with no order of hers, units were left, fewer than the entry's; its
--              "units" are those that were left
--   sold_out   with no order of hers, no unit was left
-- And `orders`: the voucher's orders as the transaction left them; and
-- `returned_event`: the last of the voucher's cancellations, expiries and restocks its stock counts
-- (read under the stock row's lock, which every return takes first), so that a
-- publication that finds the stock gone knows which returns came after it; and
-- `created`: the orders this call inserted (0 for a batch written again), which is how a
-- heal (core/src/returns.rs) counts the orders it put back; and `stock`: the units left
-- once the batch committed.
-- Written again, a batch changes nothing and reads the same, but for `created` (and a
-- `short` entry may read `sold_out`: the units it was told of went to later entries).
-- A deadlock (1213) or an order id inserted meanwhile by another voucher's batch (1062)
-- rolls the try back whole, and it is tried up to three times; a lock wait timeout (1205,
-- after 1 s) is not retried.
-- One procedure, with no temporary table and no JSON_TABLE: a fresh connection (Spin
-- keeps none) parses a stored procedure at its first CALL, and that parse cost a batch
-- of one more than its own statements.
DROP PROCEDURE IF EXISTS seckill_commit_batch_once //
DROP PROCEDURE IF EXISTS seckill_commit_batch //
CREATE PROCEDURE seckill_commit_batch(
  IN p_voucher_id BIGINT UNSIGNED,
  IN p_batch      MEDIUMTEXT CHARACTER SET utf8mb4
)
BEGIN
  DECLARE v_tries    INT DEFAULT 0;
  DECLARE v_done     BOOLEAN DEFAULT FALSE;
  DECLARE v_errno    INT;
  DECLARE v_n        INT DEFAULT JSON_LENGTH(p_batch);
  DECLARE v_i        INT;
  DECLARE v_stock    BIGINT UNSIGNED;
  DECLARE v_pay_s    BIGINT UNSIGNED;
  DECLARE v_orders   BIGINT UNSIGNED;
  DECLARE v_returned BIGINT UNSIGNED;
  -- The units the batch took, and the orders it inserted.
  DECLARE v_taken    BIGINT UNSIGNED;
  DECLARE v_created  BIGINT UNSIGNED;
  DECLARE v_order    BIGINT UNSIGNED;
  DECLARE v_user     BIGINT UNSIGNED;
  DECLARE v_units    BIGINT UNSIGNED;
  DECLARE v_held     BIGINT UNSIGNED;
  DECLARE v_held_units BIGINT UNSIGNED;
  DECLARE v_left     BIGINT UNSIGNED;
  DECLARE v_used     BOOLEAN;
  -- The sale the voucher is a bucket of (itself for a sale of one bucket), and the
  -- verdict on the buyer's order of it when that is another bucket's (by its status).
  DECLARE v_sale     BIGINT UNSIGNED;
  -- When MySQL created the voucher, and the order ids' epoch, unix seconds.
  DECLARE v_born     BIGINT UNSIGNED;
  DECLARE order_epoch BIGINT UNSIGNED DEFAULT 1704067200;
  DECLARE v_apart    VARCHAR(16) CHARACTER SET utf8mb4;
  DECLARE v_verdicts MEDIUMTEXT CHARACTER SET utf8mb4;
  DECLARE status_unpaid    TINYINT UNSIGNED DEFAULT 1;
  DECLARE status_cancelled TINYINT UNSIGNED DEFAULT 4;
  DECLARE status_expired   TINYINT UNSIGNED DEFAULT 7;
  DECLARE event_created    TINYINT UNSIGNED DEFAULT 1;
  DECLARE event_cancelled  TINYINT UNSIGNED DEFAULT 3;
  DECLARE event_expired    TINYINT UNSIGNED DEFAULT 4;
  DECLARE event_restocked  TINYINT UNSIGNED DEFAULT 5;

  SET SESSION innodb_lock_wait_timeout = 1;
  WHILE NOT v_done DO
    SET v_tries = v_tries + 1;
    BEGIN
      DECLARE EXIT HANDLER FOR SQLEXCEPTION
      BEGIN
        GET DIAGNOSTICS CONDITION 1 v_errno = MYSQL_ERRNO;
        ROLLBACK;
        IF v_errno NOT IN (1213, 1062) OR v_tries >= 3 THEN
          RESIGNAL;
        END IF;
      END;
      SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
      START TRANSACTION;
      -- With the voucher's orders before the batch, whatever became of them (a counter,
      -- so that a batch costs the same at the millionth order as at the first): Redis
      -- counts those it learnt of alike (publish.lua), and a cancellation between the
      -- commit and the publication changes neither count.
      SELECT IFNULL(MAX(stock), 0), IFNULL(MAX(pay_within_s), 900), IFNULL(MAX(orders), 0),
             IFNULL(MAX(sale_id), p_voucher_id)
        INTO v_stock, v_pay_s, v_orders, v_sale
        FROM tb_seckill_voucher WHERE voucher_id = p_voucher_id FOR UPDATE;
      SET v_born = IFNULL((SELECT TIMESTAMPDIFF(SECOND, '1970-01-01', create_time)
                             FROM tb_voucher WHERE id = p_voucher_id), 0);
      SET v_i = 0, v_taken = 0, v_created = 0, v_verdicts = '[';
      WHILE v_i < v_n DO
        SET v_order = CAST(JSON_UNQUOTE(JSON_EXTRACT(p_batch, CONCAT('$[', v_i, '][0]'))) AS UNSIGNED);
        SET v_user = CAST(JSON_UNQUOTE(JSON_EXTRACT(p_batch, CONCAT('$[', v_i, '][1]'))) AS UNSIGNED);
        -- One unit when the entry names none: a component from before quantities, still
        -- serving while this migration runs, commits as it did.
        SET v_units = IFNULL(CAST(JSON_EXTRACT(p_batch, CONCAT('$[', v_i, '][2]')) AS UNSIGNED), 1);
        SET v_held = (SELECT id FROM tb_voucher_order
                       WHERE user_id = v_user AND sale_id = v_sale);
        -- A dead order (cancelled, expired) is no order held, whatever bucket sold it.
        -- Read only when she holds one: most entries are new buyers.
        SET v_apart = NULL, v_held_units = v_units;
        IF v_held IS NOT NULL THEN
          SET v_held_units = (SELECT quantity FROM tb_voucher_order WHERE id = v_held);
          SET v_apart = (SELECT CASE WHEN voucher_id = p_voucher_id THEN NULL
                                     WHEN status = status_cancelled THEN 'cancelled'
                                     WHEN status = status_expired THEN 'expired'
                                     ELSE 'elsewhere' END
                           FROM tb_voucher_order WHERE id = v_held);
        END IF;
        -- An order id admitted before the voucher was created is another sale's: one MySQL
        -- lost, whose id it handed out again (a drainer or a heal of that sale committing
        -- now). Its second is the id's bits 32..63 (core/src/order_id.rs).
        SET v_used = (v_order >> 32) + order_epoch < v_born
                     OR EXISTS (SELECT 1 FROM tb_voucher_order WHERE id = v_order);
        IF v_taken + v_units <= v_stock AND v_held IS NULL AND NOT v_used THEN
          -- Another bucket committing the same buyer now makes this INSERT fail on
          -- uk_user_sale once it commits (1062): the try starts again and finds her order.
          INSERT INTO tb_voucher_order (id, user_id, voucher_id, sale_id, status, create_time,
                                        expire_time, quantity)
            VALUES (v_order, v_user, p_voucher_id, v_sale, status_unpaid, UTC_TIMESTAMP(),
                    UTC_TIMESTAMP() + INTERVAL v_pay_s SECOND, v_units);
          -- Its event, with an id in this voucher's commit order (its stock row is
          -- held): a read of the feed gives it its place (seckill_feed_page).
          INSERT INTO tb_order_event (type, order_id, voucher_id, user_id, at)
            VALUES (event_created, v_order, p_voucher_id, v_user, UTC_TIMESTAMP());
          SET v_held = v_order, v_used = TRUE, v_taken = v_taken + v_units,
              v_created = v_created + 1;
        END IF;
        -- Written out: neither a verdict's name nor an id needs escaping.
        SET v_left = v_stock - v_taken;
        SET v_verdicts = CONCAT(v_verdicts, IF(v_i > 0, ',', ''), '{"outcome":"',
          CASE WHEN v_apart IS NOT NULL THEN v_apart
               WHEN v_held = v_order THEN 'ordered'
               WHEN v_held IS NOT NULL THEN 'duplicate'
               WHEN v_used THEN 'id_taken'
               WHEN v_left > 0 THEN 'short'
               ELSE 'sold_out' END,
          '","order":"', IFNULL(v_held, v_order), '","units":',
          IF(v_held IS NULL AND NOT v_used AND v_left > 0, v_left, v_held_units), '}');
        SET v_i = v_i + 1;
      END WHILE;
      SET v_verdicts = CONCAT(v_verdicts, ']');
      IF v_created > 0 THEN
        UPDATE tb_seckill_voucher SET stock = stock - v_taken, orders = orders + v_created
         WHERE voucher_id = p_voucher_id;
      END IF;
      -- One MAX per type: each is read off the end of idx_event_voucher, where one MAX
      -- over the types reads every return of the voucher.
      SET v_returned = GREATEST(
        COALESCE((SELECT MAX(id) FROM tb_order_event
                   WHERE voucher_id = p_voucher_id AND type = event_cancelled), 0),
        COALESCE((SELECT MAX(id) FROM tb_order_event
                   WHERE voucher_id = p_voucher_id AND type = event_expired), 0),
        COALESCE((SELECT MAX(id) FROM tb_order_event
                   WHERE voucher_id = p_voucher_id AND type = event_restocked), 0));
      COMMIT;
      SET v_done = TRUE;
    END;
  END WHILE;
  -- The variable itself, not an expression of it: Spin's MySQL API reads a MEDIUMTEXT, and
  -- no LONGTEXT, which CONCAT makes.
  SELECT v_verdicts AS verdicts, v_orders + v_created AS orders, v_returned AS returned_event,
    v_created AS created, v_stock - v_taken AS stock;
END //

-- Appends the events of the calling transaction, whose changes are in the temporary
-- table seckill_new_events (type, order_id, voucher_id, user_id), in their order. Every
-- caller holds the voucher's stock row, so one voucher's ids follow its commit order; a
-- read of the feed gives them their place (seckill_feed_page).
DROP PROCEDURE IF EXISTS seckill_append_events //
CREATE PROCEDURE seckill_append_events()
BEGIN
  INSERT INTO tb_order_event (type, order_id, voucher_id, user_id, at)
    SELECT type, order_id, voucher_id, user_id, UTC_TIMESTAMP()
      FROM seckill_new_events ORDER BY n;
  DELETE FROM seckill_new_events;
END //

-- A page of the feed: the events after place p_after, at most p_limit, in place order
-- (place, type, order id, voucher id, user id, unix seconds, the order's units, or a
-- restock's). First it gives the events
-- committed since the last read their places, after every place given before, in id
-- order (which is each voucher's commit order), in one transaction that holds the
-- sequence row: an event still being written gets a later place, never one below a
-- place a reader has passed. Up to 4096 a call; a later read places the rest.
DROP PROCEDURE IF EXISTS seckill_feed_page //
CREATE PROCEDURE seckill_feed_page(
  IN p_after BIGINT UNSIGNED,
  IN p_limit INT UNSIGNED
)
BEGIN
  DECLARE v_next BIGINT UNSIGNED;
  DECLARE v_due  INT UNSIGNED;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;

  -- A SELECT statement, not a subquery of IF: MariaDB reads a routine's IF subquery with
  -- locks, which would wait on an event still being written.
  SELECT COUNT(*) INTO v_due FROM (SELECT 1 FROM tb_order_event WHERE seq IS NULL LIMIT 1) due;
  IF v_due > 0 THEN
    CREATE TEMPORARY TABLE IF NOT EXISTS seckill_placed (
      id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
      n  BIGINT UNSIGNED NOT NULL
    );
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT next INTO v_next FROM tb_event_seq WHERE id = 1 FOR UPDATE;
    DELETE FROM seckill_placed;
    -- A consistent read (READ COMMITTED): the events committed by now, none in flight.
    INSERT INTO seckill_placed (id, n)
      SELECT id, ROW_NUMBER() OVER (ORDER BY id)
        FROM (SELECT id FROM tb_order_event WHERE seq IS NULL ORDER BY id LIMIT 4096) due;
    -- From the list to each event by its key, so that only those rows are locked: a scan
    -- of the events would wait on one still being written (a multi-table UPDATE reads the
    -- latest version of each row it meets, under a lock).
    UPDATE seckill_placed p STRAIGHT_JOIN tb_order_event e ON e.id = p.id
       SET e.seq = v_next + p.n - 1;
    UPDATE tb_event_seq SET next = v_next + (SELECT COUNT(*) FROM seckill_placed) WHERE id = 1;
    COMMIT;
  END IF;
  -- An event names the voucher the storefront sold, whichever bucket's stock it moved.
  SELECT seq, type, order_id,
         COALESCE((SELECT s.sale_id FROM tb_seckill_voucher s WHERE s.voucher_id = e.voucher_id),
                  voucher_id),
         user_id, TIMESTAMPDIFF(SECOND, '1970-01-01', at),
         -- Cast: Spin's MySQL API takes no DECIMAL, which COALESCE of an unsigned column makes.
         CAST(COALESCE(e.units,
                       (SELECT o.quantity FROM tb_voucher_order o WHERE o.id = e.order_id), 1)
              AS UNSIGNED)
    FROM tb_order_event e WHERE seq > p_after ORDER BY seq LIMIT p_limit;
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

-- Creates a voucher's sale in p_buckets buckets (docs/design.md, "Buckets"): the
-- voucher, the sale's first bucket, and p_buckets - 1 more, each a voucher row of its own
-- with the same terms and sale_id naming the first; the stock is spread as evenly as it
-- goes, the first buckets taking one more; p_draw_ms opens the sale with a draw
-- (006_draw.sql); p_per_buyer is the most units one buyer may hold (007_quantity.sql);
-- p_announce when the sale is listed, NULL from its creation (008_announce.sql). p_ids: NULL for ids handed out in order, or a JSON array of the
-- buckets' ids, ascending, the sale's first, which a Redis Cluster's client chose so that
-- the buckets spread over its primaries; taken only when every voucher id is below the
-- first (else nothing is written and no row returned: the caller chooses again).
-- Returns a row per bucket, the sale first: its id and its share.
DROP PROCEDURE IF EXISTS seckill_create_voucher //
CREATE PROCEDURE seckill_create_voucher(
  IN p_title        VARCHAR(128) CHARACTER SET utf8mb4,
  IN p_description  VARCHAR(1024) CHARACTER SET utf8mb4,
  IN p_stock        INT UNSIGNED,
  IN p_begin        DATETIME,
  IN p_end          DATETIME,
  IN p_pay_within_s INT UNSIGNED,
  IN p_buckets      INT UNSIGNED,
  IN p_draw_ms      INT UNSIGNED,
  IN p_ids          TEXT CHARACTER SET utf8mb4,
  IN p_per_buyer    INT UNSIGNED,
  IN p_announce     DATETIME
)
create_voucher: BEGIN
  DECLARE v_sale  BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_id    BIGINT UNSIGNED;
  DECLARE v_k     INT UNSIGNED DEFAULT 0;
  DECLARE v_share INT UNSIGNED;
  DECLARE v_max   BIGINT UNSIGNED;
  -- One creation time for every bucket: the sale's (seckill_commit_batch).
  DECLARE v_now   DATETIME DEFAULT UTC_TIMESTAMP();
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;
  -- Two creations naming ids both lock the end of the ids, then both insert there: one
  -- is chosen as a deadlock's victim (1213). It writes nothing and returns no row, as
  -- when its ids are taken: the caller chooses again.
  DECLARE EXIT HANDLER FOR 1213
  BEGIN
    ROLLBACK;
    IF p_ids IS NULL THEN
      RESIGNAL;
    END IF;
    SELECT voucher_id, initial_stock FROM tb_seckill_voucher WHERE FALSE;
  END;

  START TRANSACTION;
  IF p_ids IS NOT NULL THEN
    -- Locks the end of the ids, so that no creation takes one of these meanwhile.
    SELECT COALESCE(MAX(id), 0) INTO v_max FROM tb_voucher FOR UPDATE;
    IF v_max >= CAST(JSON_UNQUOTE(JSON_EXTRACT(p_ids, '$[0]')) AS UNSIGNED) THEN
      ROLLBACK;
      SELECT voucher_id, initial_stock FROM tb_seckill_voucher WHERE FALSE;
      LEAVE create_voucher;
    END IF;
  END IF;
  WHILE v_k < GREATEST(p_buckets, 1) DO
    IF p_ids IS NULL THEN
      INSERT INTO tb_voucher (title, description, create_time)
        VALUES (p_title, p_description, v_now);
      SET v_id = LAST_INSERT_ID();
    ELSE
      SET v_id = CAST(JSON_UNQUOTE(JSON_EXTRACT(p_ids, CONCAT('$[', v_k, ']'))) AS UNSIGNED);
      INSERT INTO tb_voucher (id, title, description, create_time)
        VALUES (v_id, p_title, p_description, v_now);
    END IF;
    IF v_sale = 0 THEN
      SET v_sale = v_id;
    END IF;
    SET v_share = p_stock DIV GREATEST(p_buckets, 1)
                  + IF(v_k < p_stock MOD GREATEST(p_buckets, 1), 1, 0);
    INSERT INTO tb_seckill_voucher (voucher_id, initial_stock, stock, begin_time, end_time,
                                    pay_within_s, sale_id, draw_ms, per_buyer, announce_time)
      VALUES (v_id, v_share, v_share, p_begin, p_end, p_pay_within_s, v_sale, p_draw_ms,
              p_per_buyer, p_announce);
    SET v_k = v_k + 1;
  END WHILE;
  COMMIT;
  SELECT s.voucher_id, s.initial_stock, TIMESTAMPDIFF(SECOND, '1970-01-01', v.create_time)
    FROM tb_seckill_voucher s JOIN tb_voucher v ON v.id = s.voucher_id
   WHERE s.sale_id = v_sale ORDER BY s.voucher_id;
END //

-- Changes a sale's terms, every bucket of it, in one transaction that holds their stock
-- rows (in id order, as a restock racing it would), only if they are still at
-- p_version: a change read before another change or an end (which move the version on)
-- writes nothing. The caller merged the change into the terms it read and checked them
-- as a creation's; what it may not know is the time, so the sale's opening is decided
-- here, by MySQL's clock: p_reshape = 1 names a change only an unopened sale may take
-- (its window's begin, stock below its total, the payment window, per_buyer, the draw,
-- the announcement), refused once the begin is less than p_guard_s ahead or an order is
-- committed; and a new end of a sale whose end has passed is refused. Before that
-- the stock is p_stock units, spread as the creation spread them. Once open, a p_stock
-- above the sale's total adds the difference as a restock: each bucket its share, the
-- first buckets one more, with a sale.restocked event carrying its units, which
-- lua/restock.lua gives to the live sale once (after the line: docs/design.md). Every
-- change is a sale.changed event of the sale.
-- One row: the outcome ('changed'; 'stale': the version moved on; 'open': a reshape of
-- a sale that opened; 'ended': a new end of a sale that ended; 'missing': no such sale)
-- and the version after.
DROP PROCEDURE IF EXISTS seckill_change_sale //
CREATE PROCEDURE seckill_change_sale(
  IN p_sale         BIGINT UNSIGNED,
  IN p_version      INT UNSIGNED,
  IN p_reshape      TINYINT UNSIGNED,
  IN p_guard_s      INT UNSIGNED,
  IN p_title        VARCHAR(128) CHARACTER SET utf8mb4,
  IN p_description  VARCHAR(1024) CHARACTER SET utf8mb4,
  IN p_stock        INT UNSIGNED,
  IN p_begin        DATETIME,
  IN p_end          DATETIME,
  IN p_pay_within_s INT UNSIGNED,
  IN p_draw_ms      INT UNSIGNED,
  IN p_per_buyer    INT UNSIGNED,
  IN p_announce     DATETIME
)
change_sale: BEGIN
  DECLARE v_version INT UNSIGNED;
  DECLARE v_begin   DATETIME;
  DECLARE v_end     DATETIME;
  DECLARE v_orders  BIGINT UNSIGNED;
  DECLARE v_total   BIGINT UNSIGNED;
  DECLARE v_buckets INT UNSIGNED;
  DECLARE v_add     BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_share   BIGINT UNSIGNED;
  DECLARE v_id      BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_k       INT UNSIGNED DEFAULT 0;
  DECLARE event_restocked TINYINT UNSIGNED DEFAULT 5;
  DECLARE event_changed   TINYINT UNSIGNED DEFAULT 6;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;

  SET SESSION innodb_lock_wait_timeout = 5;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  -- Every bucket's row, locked in id order (idx_sale); the first bucket's terms are the
  -- sale's.
  SELECT COUNT(*), SUM(initial_stock), SUM(orders) INTO v_buckets, v_total, v_orders
    FROM tb_seckill_voucher WHERE sale_id = p_sale FOR UPDATE;
  SELECT terms_version, begin_time, end_time INTO v_version, v_begin, v_end
    FROM tb_seckill_voucher WHERE voucher_id = p_sale AND sale_id = p_sale;
  IF v_version IS NULL THEN
    ROLLBACK;
    SELECT 'missing' AS outcome, 0 AS version;
    LEAVE change_sale;
  END IF;
  IF v_version <> p_version THEN
    ROLLBACK;
    SELECT 'stale' AS outcome, v_version AS version;
    LEAVE change_sale;
  END IF;
  -- Orders committed say it opened, whatever the clocks say.
  IF p_reshape = 1 AND (v_begin <= UTC_TIMESTAMP() + INTERVAL p_guard_s SECOND
                        OR v_orders > 0) THEN
    ROLLBACK;
    SELECT 'open' AS outcome, v_version AS version;
    LEAVE change_sale;
  END IF;
  IF p_end <> v_end AND v_end <= UTC_TIMESTAMP() THEN
    ROLLBACK;
    SELECT 'ended' AS outcome, v_version AS version;
    LEAVE change_sale;
  END IF;
  UPDATE tb_voucher v JOIN tb_seckill_voucher s ON s.voucher_id = v.id
     SET v.title = p_title, v.description = p_description
   WHERE s.sale_id = p_sale;
  IF p_reshape = 1 OR p_stock > v_total THEN
    -- Unopened, nothing is sold: every bucket's units are its share of the new stock.
    -- Open: each bucket takes its share of the units added.
    SET v_add = IF(p_reshape = 1, p_stock, p_stock - v_total);
    WHILE v_k < v_buckets DO
      SELECT voucher_id INTO v_id FROM tb_seckill_voucher
       WHERE sale_id = p_sale AND voucher_id > v_id ORDER BY voucher_id LIMIT 1;
      SET v_share = v_add DIV v_buckets + IF(v_k < v_add MOD v_buckets, 1, 0);
      IF p_reshape = 1 THEN
        UPDATE tb_seckill_voucher SET initial_stock = v_share, stock = v_share
         WHERE voucher_id = v_id;
      ELSEIF v_share > 0 THEN
        UPDATE tb_seckill_voucher
           SET initial_stock = initial_stock + v_share, stock = stock + v_share
         WHERE voucher_id = v_id;
        INSERT INTO tb_order_event (type, order_id, voucher_id, user_id, at, units)
          VALUES (event_restocked, 0, v_id, 0, UTC_TIMESTAMP(), v_share);
      END IF;
      SET v_k = v_k + 1;
    END WHILE;
  END IF;
  UPDATE tb_seckill_voucher
     SET begin_time = p_begin, end_time = p_end, pay_within_s = p_pay_within_s,
         draw_ms = p_draw_ms, per_buyer = p_per_buyer, announce_time = p_announce,
         terms_version = p_version + 1
   WHERE sale_id = p_sale;
  INSERT INTO tb_order_event (type, order_id, voucher_id, user_id, at, units)
    VALUES (event_changed, 0, p_sale, 0, UTC_TIMESTAMP(), 0);
  COMMIT;
  SELECT 'changed' AS outcome, p_version + 1 AS version;
END //

-- Moves one unpaid order on: to paid (p_to = 2) or cancelled (p_to = 4), for its buyer
-- p_user (0: anyone, the admin or the payment system). An unpaid order past its
-- deadline expires instead, whatever was asked: its units go back to the stock in the
-- same transaction. The voucher's stock row is locked before the order's, as the group
-- commit and the expiry lock them, so that none of them deadlock; and only once the order
-- is known to be p_user's (its buyer and voucher never change, so a plain read tells), so
-- that nobody naming other buyers' orders holds up the group commit.
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
  DECLARE v_units   INT UNSIGNED;
  DECLARE v_changed INT DEFAULT 0;
  DECLARE status_unpaid    TINYINT UNSIGNED DEFAULT 1;
  DECLARE status_paid      TINYINT UNSIGNED DEFAULT 2;
  DECLARE status_cancelled TINYINT UNSIGNED DEFAULT 4;
  DECLARE status_expired   TINYINT UNSIGNED DEFAULT 7;
  DECLARE event_paid       TINYINT UNSIGNED DEFAULT 2;
  DECLARE event_cancelled  TINYINT UNSIGNED DEFAULT 3;
  DECLARE event_expired    TINYINT UNSIGNED DEFAULT 4;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;

  -- A buyer's payment or cancellation waits its turn on the stock row rather than fail:
  -- on a Galera cluster every node's writers of a sale queue there, and another node's
  -- write goes first whenever it meets this one. (A group commit, which must not pile up
  -- behind a stuck drainer, waits 1 s.)
  SET SESSION innodb_lock_wait_timeout = 5;
  -- Before SET TRANSACTION, which holds for the next transaction only: the events table's
  -- own statements would use it up.
  CALL seckill_new_events();
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  SELECT voucher_id, user_id, status INTO v_voucher, v_user, v_status FROM tb_voucher_order
   WHERE id = p_order_id;
  IF p_user <> 0 AND v_user <> p_user THEN
    SET v_voucher = NULL;
  END IF;
  -- An order settled already (a retry of a settle that committed, say) is answered as it
  -- stands, with no lock: on a Galera cluster a lock this transaction takes and writes
  -- nothing under is no key of its write set, and another node's write of the row then
  -- waits on it while this transaction's commit waits behind that write.
  IF v_voucher IS NOT NULL AND v_status = status_unpaid THEN
    SELECT voucher_id INTO v_voucher FROM tb_seckill_voucher
     WHERE voucher_id = v_voucher FOR UPDATE;
    SELECT status, expire_time <= UTC_TIMESTAMP(), quantity INTO v_status, v_expired, v_units
      FROM tb_voucher_order WHERE id = p_order_id FOR UPDATE;
    IF v_status = status_unpaid AND v_expired THEN
      UPDATE tb_voucher_order SET status = status_expired WHERE id = p_order_id;
      UPDATE tb_seckill_voucher SET stock = stock + v_units WHERE voucher_id = v_voucher;
      INSERT INTO seckill_new_events (type, order_id, voucher_id, user_id)
        VALUES (event_expired, p_order_id, v_voucher, v_user);
      SET v_status = status_expired, v_changed = 1;
    ELSEIF v_status = status_unpaid THEN
      UPDATE tb_voucher_order SET status = p_to WHERE id = p_order_id;
      IF p_to = status_cancelled THEN
        UPDATE tb_seckill_voucher SET stock = stock + v_units WHERE voucher_id = v_voucher;
      END IF;
      INSERT INTO seckill_new_events (type, order_id, voucher_id, user_id)
        VALUES (IF(p_to = status_paid, event_paid, event_cancelled), p_order_id, v_voucher,
                v_user);
      SET v_status = p_to, v_changed = 1;
    END IF;
    CALL seckill_append_events();
  END IF;
  COMMIT;
  IF v_voucher IS NOT NULL THEN
    SELECT v_status AS status, v_changed AS changed, v_voucher AS voucher_id;
  END IF;
END //

-- Expires up to p_limit of the voucher's unpaid orders past their deadline, giving all
-- their units back to the stock, in one transaction. One row per order expired (order id, user
-- id); then, in every row, the earliest deadline left among its unpaid orders as unix
-- seconds (NULL when none).
DROP PROCEDURE IF EXISTS seckill_expire_due //
CREATE PROCEDURE seckill_expire_due(
  IN p_voucher_id BIGINT UNSIGNED,
  IN p_limit      INT UNSIGNED
)
BEGIN
  DECLARE v_n INT UNSIGNED DEFAULT 0;
  DECLARE v_due INT UNSIGNED;
  DECLARE status_unpaid  TINYINT UNSIGNED DEFAULT 1;
  DECLARE status_expired TINYINT UNSIGNED DEFAULT 7;
  DECLARE event_expired  TINYINT UNSIGNED DEFAULT 4;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;

  SET SESSION innodb_lock_wait_timeout = 1;
  -- Before SET TRANSACTION, which holds for the next transaction only: the events table's
  -- own statements would use it up.
  CALL seckill_new_events();
  -- Nothing due, no transaction: most sweeps find nothing, and on a Galera cluster a lock
  -- taken with nothing written under it holds up another node's write of the row (see
  -- seckill_settle_order). A plain read, as the feed's (a routine's IF subquery locks).
  SELECT COUNT(*) INTO v_due FROM (
    SELECT 1 FROM tb_voucher_order
     WHERE voucher_id = p_voucher_id AND status = status_unpaid
       AND expire_time <= UTC_TIMESTAMP() LIMIT 1) due;
  IF v_due > 0 THEN
    SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
    START TRANSACTION;
    SELECT voucher_id INTO @seckill_voucher FROM tb_seckill_voucher
     WHERE voucher_id = p_voucher_id FOR UPDATE;
    INSERT INTO seckill_new_events (type, order_id, voucher_id, user_id)
      SELECT event_expired, id, voucher_id, user_id FROM tb_voucher_order
       WHERE voucher_id = p_voucher_id AND status = status_unpaid
         AND expire_time <= UTC_TIMESTAMP()
       ORDER BY id LIMIT p_limit FOR UPDATE;
    SELECT COUNT(*) INTO v_n FROM seckill_new_events;
    -- None when another request settled them while this waited for the row (the feed's
    -- expiries take no sweep lease): no units to add.
    IF v_n > 0 THEN
      -- A join the events drive: MariaDB reads every order for an UPDATE's IN (SELECT).
      UPDATE seckill_new_events n STRAIGHT_JOIN tb_voucher_order o ON o.id = n.order_id
         SET o.status = status_expired;
      UPDATE tb_seckill_voucher
         SET stock = stock + (SELECT SUM(o.quantity) FROM seckill_new_events n
                                JOIN tb_voucher_order o ON o.id = n.order_id)
       WHERE voucher_id = p_voucher_id;
    END IF;
    CREATE TEMPORARY TABLE IF NOT EXISTS seckill_expired (order_id BIGINT UNSIGNED, user_id BIGINT UNSIGNED);
    DELETE FROM seckill_expired;
    INSERT INTO seckill_expired SELECT order_id, user_id FROM seckill_new_events;
    CALL seckill_append_events();
    COMMIT;
  END IF;
  -- A SELECT statement, not a subquery of SET: MariaDB reads a routine's SET subquery with
  -- locks, which would wait on the orders other vouchers' group commits are writing.
  SELECT TIMESTAMPDIFF(SECOND, '1970-01-01', MIN(expire_time)) INTO @seckill_next
    FROM tb_voucher_order WHERE voucher_id = p_voucher_id AND status = status_unpaid;
  IF v_n > 0 THEN
    SELECT order_id, user_id, @seckill_next AS next_due FROM seckill_expired;
  ELSE
    SELECT NULL AS order_id, NULL AS user_id, @seckill_next AS next_due;
  END IF;
END //

-- The feed's expiries (src/storage/returns.rs, `sweep_all_overdue`): every sale's unpaid
-- orders past their deadline, the p_oldest longest overdue and the p_newest most recently
-- overdue, expired in one transaction with no sweep lease, each bucket's as
-- seckill_expire_due expires its own. The oldest first, so that an order waits only
-- behind those due before it, however many fall due after it; the newest too, so that an
-- order just past its deadline expires at once behind a backlog that only drains (after
-- MySQL was away, say); and one commit for all, so that a second's reads keep up with
-- many sales' orders falling due at once. It waits for no lock: a bucket's stock row or
-- an order another transaction holds is left to the next call, so that a busy sale (or a
-- stuck lock) holds up no other sale's expiries, nor a group commit behind this.
-- One row per bucket whose orders it expired and that has a sale to give the units back
-- to, the newest sales (the likeliest still on sale) first: its id.
DROP PROCEDURE IF EXISTS seckill_expire_overdue //
CREATE PROCEDURE seckill_expire_overdue(
  IN p_oldest INT UNSIGNED,
  IN p_newest INT UNSIGNED
)
BEGIN
  DECLARE status_unpaid  TINYINT UNSIGNED DEFAULT 1;
  DECLARE status_expired TINYINT UNSIGNED DEFAULT 7;
  DECLARE event_expired  TINYINT UNSIGNED DEFAULT 4;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    RESIGNAL;
  END;

  -- Were a lock waited for after all (a plan gone astray), not for long.
  SET SESSION innodb_lock_wait_timeout = 1;
  -- Before SET TRANSACTION, which holds for the next transaction only: the temporary
  -- tables' own statements would use it up.
  CALL seckill_new_events();
  CREATE TEMPORARY TABLE IF NOT EXISTS seckill_due (
    order_id   BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    voucher_id BIGINT UNSIGNED NOT NULL
  );
  CREATE TEMPORARY TABLE IF NOT EXISTS seckill_overdue (
    voucher_id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    expired    INT UNSIGNED    NOT NULL
  );
  DELETE FROM seckill_due;
  DELETE FROM seckill_overdue;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;
  -- The orders, by the index on status and deadline: a consistent read, with no locks, at
  -- READ COMMITTED.
  INSERT INTO seckill_due (order_id, voucher_id)
    SELECT id, voucher_id FROM (
      (SELECT id, voucher_id FROM tb_voucher_order
        WHERE status = status_unpaid AND expire_time <= UTC_TIMESTAMP()
        ORDER BY expire_time LIMIT p_oldest)
      UNION
      (SELECT id, voucher_id FROM tb_voucher_order
        WHERE status = status_unpaid AND expire_time <= UTC_TIMESTAMP()
        ORDER BY expire_time DESC LIMIT p_newest)) due;
  -- Their buckets' stock rows, locked in id order before any of their orders, as the
  -- writers of a bucket's orders lock them; and the buckets that have none (a sale
  -- deleted), whose orders must not stay first in line for good. Each statement that
  -- locks stock rows is driven by the buckets it names, by the key: a scan of the table
  -- (the plan MariaDB picks for many orders a bucket) would lock every sale's row.
  INSERT INTO seckill_overdue (voucher_id, expired)
    SELECT v.voucher_id, 0 FROM (SELECT DISTINCT voucher_id FROM seckill_due) d
      STRAIGHT_JOIN tb_seckill_voucher v FORCE INDEX (PRIMARY) ON v.voucher_id = d.voucher_id
     ORDER BY v.voucher_id FOR UPDATE SKIP LOCKED;
  INSERT INTO seckill_overdue (voucher_id, expired)
    SELECT DISTINCT d.voucher_id, 0 FROM seckill_due d
     WHERE NOT EXISTS (SELECT 1 FROM tb_seckill_voucher v WHERE v.voucher_id = d.voucher_id);
  -- Read again under the locks: a buyer may have paid meanwhile.
  INSERT INTO seckill_new_events (type, order_id, voucher_id, user_id)
    SELECT event_expired, o.id, o.voucher_id, o.user_id
      FROM seckill_due d STRAIGHT_JOIN tb_voucher_order o ON o.id = d.order_id
     WHERE o.status = status_unpaid
       AND o.voucher_id IN (SELECT voucher_id FROM seckill_overdue)
     ORDER BY o.id FOR UPDATE SKIP LOCKED;
  -- Joins the events drive: MariaDB reads every order for an UPDATE's IN (SELECT).
  UPDATE seckill_new_events n STRAIGHT_JOIN tb_voucher_order o ON o.id = n.order_id
     SET o.status = status_expired;
  UPDATE seckill_overdue d JOIN (
      SELECT voucher_id, COUNT(*) AS expired FROM seckill_new_events GROUP BY voucher_id) n
      ON n.voucher_id = d.voucher_id
     SET d.expired = n.expired;
  UPDATE (
      SELECT n.voucher_id, SUM(o.quantity) AS units
        FROM seckill_new_events n STRAIGHT_JOIN tb_voucher_order o ON o.id = n.order_id
       GROUP BY n.voucher_id) given
      STRAIGHT_JOIN tb_seckill_voucher v FORCE INDEX (PRIMARY)
        ON v.voucher_id = given.voucher_id
     SET v.stock = v.stock + given.units;
  CALL seckill_append_events();
  COMMIT;
  SELECT d.voucher_id FROM seckill_overdue d
   WHERE d.expired > 0
     AND EXISTS (SELECT 1 FROM tb_seckill_voucher v WHERE v.voucher_id = d.voucher_id)
   ORDER BY d.voucher_id DESC;
END //

DELIMITER ;

-- The migrations' guard (000_helpers.sql) is needed no more.
DROP PROCEDURE IF EXISTS seckill_add;
