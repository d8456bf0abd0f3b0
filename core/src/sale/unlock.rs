//! `lua/unlock.lua`: a drainer that gives up releases the drain lock at once, so that a
//! waiter takes over without sitting out the rest of its lifetime.

use crate::buckets::ALL_OUT_MS;
use crate::ids::VoucherId;
use crate::redis::{Command, Reply, UnexpectedReply, ALL_OUT, UNLOCK};

use super::{parse_flag, Call, Keys};

/// Deletes the voucher's drain lock while it is still `token`'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unlock<'a> {
    pub voucher_id: VoucherId,
    pub token: &'a str,
}

impl Call for Unlock<'_> {
    /// Whether the lock was this token's and is released.
    type Output = bool;

    fn command(&self) -> Command {
        Command::script(
            &UNLOCK,
            vec![Keys::new(self.voucher_id).lease()],
            vec![self.token.into()],
        )
    }

    fn parse(&self, reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        parse_flag(reply)
    }
}

/// `lua/all_out.lua`: every bucket of the sale was found sold out; the buyers of this one
/// hear `sold_out` from it alone for [`ALL_OUT_MS`] (docs/design.md, "Buckets").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkAllOut {
    pub voucher_id: VoucherId,
}

impl Call for MarkAllOut {
    /// Whether the bucket was still sold out, and is marked.
    type Output = bool;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        Command::script(
            &ALL_OUT,
            vec![keys.voucher(), keys.all_out()],
            vec![ALL_OUT_MS.into()],
        )
    }

    fn parse(&self, reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        parse_flag(reply)
    }
}
