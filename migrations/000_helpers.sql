-- What the later migrations share: seckill_add, the one guard that makes a schema change
-- safe to apply again. ALTER TABLE ... ADD COLUMN/INDEX IF NOT EXISTS is MariaDB's alone:
-- this works on MySQL 8 too. 999_procedures.sql, applied last, drops it.
-- p_kind: COLUMN, INDEX or UNIQUE INDEX; p_definition follows the name in the ALTER TABLE
-- (a column's type, an index's columns, and any further clause of the same statement).
-- Sets @seckill_added to whether it changed the table, so that a migration can fill a
-- new column once: UPDATE ... WHERE @seckill_added.

DELIMITER //

DROP PROCEDURE IF EXISTS seckill_add //
CREATE PROCEDURE seckill_add(
  IN p_table      VARCHAR(64),
  IN p_kind       VARCHAR(12),
  IN p_name       VARCHAR(64),
  IN p_definition VARCHAR(255)
)
BEGIN
  SET @seckill_added = (p_kind = 'COLUMN' AND NOT EXISTS (
        SELECT 1 FROM information_schema.columns
         WHERE table_schema = DATABASE() AND table_name = p_table AND column_name = p_name))
    OR (p_kind <> 'COLUMN' AND NOT EXISTS (
        SELECT 1 FROM information_schema.statistics
         WHERE table_schema = DATABASE() AND table_name = p_table AND index_name = p_name));
  IF @seckill_added THEN
    SET @seckill_ddl = CONCAT('ALTER TABLE ', p_table, ' ADD ', p_kind, ' ', p_name, ' ',
                              p_definition);
    PREPARE ddl FROM @seckill_ddl;
    EXECUTE ddl;
    DEALLOCATE PREPARE ddl;
  END IF;
END //

DELIMITER ;
