//! `lua/end.lua`: the merchant ends a sale now.

use crate::ids::BucketId;
use crate::redis::{args, Command, Reply, UnexpectedReply, END};

use super::{parse_flag, Call, Keys};

/// Ends the voucher's sale now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndSale {
    pub voucher_id: BucketId,
}

impl Call for EndSale {
    /// Whether Redis holds the sale (else a sync installs MySQL's window, ended).
    type Output = bool;

    fn command(&self) -> Command {
        Command::script(&END, vec![Keys::new(self.voucher_id).voucher()], args![])
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        parse_flag(reply)
    }
}
