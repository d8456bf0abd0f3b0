-- A sale unlisted until its announcement (docs/design.md, "Unlisted until announced"):
-- until announce_time every public route answers as for an id that does not exist. NULL,
-- every sale before it and the default: listed from its creation.
-- Idempotent: safe to apply again.

CALL seckill_add('tb_seckill_voucher', 'COLUMN', 'announce_time', 'DATETIME NULL DEFAULT NULL');
