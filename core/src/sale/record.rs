//! `lua/record.lua`: what Redis knows of a buyer's order of a voucher.

use crate::ids::{BucketId, UserId};
use crate::order_id::OrderId;
use crate::redis::{args, Command, Reply, UnexpectedReply, RECORD};

use super::{Call, Keys};

/// A buyer's holding in a voucher's sale, as Redis knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// Her order is recorded.
    Order(OrderId),
    /// The sale is whole in Redis and she holds no order.
    Nothing,
    /// No such voucher exists.
    Unknown,
    /// Redis holds no whole sale state for the voucher: MySQL knows.
    Missing,
}

/// The buyer's holding in the voucher's sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadHolding {
    pub voucher_id: BucketId,
    pub user: UserId,
}

impl Call for ReadHolding {
    type Output = Holding;

    fn command(&self) -> Command {
        let keys = Keys::new(self.voucher_id);
        Command::script(
            &RECORD,
            vec![
                keys.voucher(),
                keys.buyers(),
                keys.absent(),
                keys.highest_voucher(),
            ],
            args![
                user = self.user.to_string(),
                voucher_id = self.voucher_id.to_string(),
            ],
        )
    }

    fn parse(reply: Vec<Reply>) -> Result<Holding, UnexpectedReply> {
        let holding = match reply.as_slice() {
            [tag, Reply::Bytes(id)] if tag.is_tag("order") => std::str::from_utf8(id)
                .ok()
                .and_then(OrderId::parse)
                .map(Holding::Order),
            [tag] if tag.is_tag("none") => Some(Holding::Nothing),
            [tag] if tag.is_tag("unknown") => Some(Holding::Unknown),
            [tag] if tag.is_tag("missing") => Some(Holding::Missing),
            _ => None,
        };
        holding.ok_or(UnexpectedReply(reply))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_holding() {
        let cases = [
            (
                vec![Reply::text("order"), Reply::text("77")],
                Some(Holding::Order(OrderId::from_raw(77))),
            ),
            (vec![Reply::text("none")], Some(Holding::Nothing)),
            (vec![Reply::text("unknown")], Some(Holding::Unknown)),
            (vec![Reply::text("missing")], Some(Holding::Missing)),
            (vec![Reply::text("order"), Reply::text("x")], None),
            (vec![], None),
        ];
        for (reply, expected) in cases {
            assert_eq!(
                ReadHolding::parse(reply.clone()).ok(),
                expected,
                "{reply:?}"
            );
        }
    }
}
