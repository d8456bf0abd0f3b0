//! `lua/clear.lua`: a voucher just created takes its id over whole, whatever Redis holds
//! under it of a voucher MySQL lost (docs/operations.md, "After restoring MySQL").

use crate::ids::VoucherId;
use crate::redis::{Command, Reply, UnexpectedReply, CLEAR};

use super::{Call, Keys};

/// Removes every key of `voucher_id`'s sale before its creation installs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clear {
    pub voucher_id: VoucherId,
}

impl Call for Clear {
    /// How many keys held state of a lost voucher of this id.
    type Output = i64;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        Command::script(
            &CLEAR,
            vec![
                keys.voucher(),
                keys.buyers(),
                keys.queue(),
                keys.lease(),
                keys.sweep(),
                keys.entrants(),
                keys.drawn(),
                keys.all_out(),
                keys.metrics(),
                keys.absent(),
                keys.sync_lease(),
                keys.seen_out(),
            ],
            Vec::new(),
        )
    }

    fn parse(&self, reply: Vec<Reply>) -> Result<i64, UnexpectedReply> {
        match reply.as_slice() {
            [Reply::Int(removed)] => Ok(*removed),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}
