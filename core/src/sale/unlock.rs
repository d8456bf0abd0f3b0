//! `lua/unlock.lua`: a drainer that gives up releases the drain lock at once, so that a
//! waiter takes over without sitting out the rest of its lifetime.

use crate::ids::BucketId;
use crate::redis::{args, Command, Reply, UnexpectedReply, UNLOCK};

use super::{parse_flag, Call, Keys};

/// Deletes the voucher's drain lock while it is still `token`'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unlock<'a> {
    pub voucher_id: BucketId,
    pub token: &'a str,
}

impl Call for Unlock<'_> {
    /// Whether the lock was this token's and is released.
    type Output = bool;

    fn command(&self) -> Command {
        Command::script(
            &UNLOCK,
            vec![Keys::new(self.voucher_id).lease()],
            args![token = self.token],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        parse_flag(reply)
    }
}
