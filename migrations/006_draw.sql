-- An opening draw (docs/design.md, "The opening draw"): a sale with `draw_ms` > 0 takes
-- the presses of its first draw_ms milliseconds as entries in a draw, and picks its
-- winners at random when the window closes. 0, every sale before it: first come, first
-- served.
-- Idempotent: safe to apply again.

CALL seckill_add('tb_seckill_voucher', 'COLUMN', 'draw_ms', 'INT UNSIGNED NOT NULL DEFAULT 0');
