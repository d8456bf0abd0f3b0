//! `lua/leave.lua`: a buyer leaves the sale's line.

use crate::ids::{SaleId, UserId};
use crate::redis::{args, Command, Reply, UnexpectedReply, LEAVE};

use super::{Call, Keys};

/// Takes `user` out of the sale's line (docs/design.md, "The line"); whether she was in
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leave {
    pub sale: SaleId,
    pub user: UserId,
}

impl Call for Leave {
    type Output = bool;

    fn command(&self) -> Command {
        let keys = Keys::new(self.sale.first_bucket());
        Command::script(
            &LEAVE,
            std::iter::once(keys.metrics())
                .chain(keys.lines())
                .collect(),
            args![user = self.user.to_string()],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        match reply.as_slice() {
            [Reply::Int(left @ (0 | 1))] => Ok(*left == 1),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}
