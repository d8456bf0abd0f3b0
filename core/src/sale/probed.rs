//! `lua/probed.lua`: what a voucher lookup learnt from MySQL, kept in Redis.

use crate::ids::{BucketId, VoucherId};
use crate::redis::{args, Command, Reply, UnexpectedReply, PROBED};

use super::{parse_any, Call, Keys, ABSENT_MS};

/// Keeps what a voucher lookup learnt from MySQL (see `lua/probed.lua`): the highest
/// voucher id it has handed out, and whether the voucher asked about is absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probed {
    pub voucher_id: BucketId,
    pub absent: bool,
    /// The highest voucher id MySQL handed out, any row's (a [`VoucherId`]); `None` when
    /// MySQL holds no voucher at all.
    pub highest: Option<VoucherId>,
}

impl Call for Probed {
    type Output = ();

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        Command::script(
            &PROBED,
            vec![keys.absent(), keys.highest_voucher()],
            args![
                absent = i64::from(self.absent),
                absent_ms = ABSENT_MS,
                // With no voucher at all, every id is above the highest.
                highest = self.highest.map_or(0, VoucherId::raw).to_string(),
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<(), UnexpectedReply> {
        parse_any(reply)
    }
}
