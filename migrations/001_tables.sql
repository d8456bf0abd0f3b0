-- Vouchers, their flash-sale terms and the orders. Times are UTC.
-- Idempotent: safe to apply again.

CREATE TABLE IF NOT EXISTS tb_voucher (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  title       VARCHAR(128)    NOT NULL,
  description VARCHAR(1024)   NOT NULL DEFAULT '',
  create_time DATETIME        NOT NULL,
  PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS tb_seckill_voucher (
  voucher_id    BIGINT UNSIGNED NOT NULL,
  initial_stock INT UNSIGNED    NOT NULL,
  -- Only ever lowered, by seckill_commit_batch, under a lock on this row.
  stock         INT UNSIGNED    NOT NULL,
  begin_time    DATETIME        NOT NULL,
  end_time      DATETIME        NOT NULL,
  PRIMARY KEY (voucher_id),
  CONSTRAINT fk_seckill_voucher FOREIGN KEY (voucher_id) REFERENCES tb_voucher (id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;

CREATE TABLE IF NOT EXISTS tb_voucher_order (
  -- Allocated by the admission script, not by MySQL: see docs/design.md, "Order ids".
  id          BIGINT UNSIGNED  NOT NULL,
  user_id     BIGINT UNSIGNED  NOT NULL,
  voucher_id  BIGINT UNSIGNED  NOT NULL,
  -- 1 unpaid, 2 paid, 3 used, 4 cancelled, 5 refunding, 6 refunded
  status      TINYINT UNSIGNED NOT NULL DEFAULT 1,
  create_time DATETIME         NOT NULL,
  PRIMARY KEY (id),
  -- The last line of defence for one order per buyer, whatever Redis says.
  UNIQUE KEY uk_user_voucher (user_id, voucher_id),
  KEY idx_voucher_order (voucher_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
