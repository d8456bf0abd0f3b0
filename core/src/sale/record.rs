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

/// Where a buyer's own order of a sale is read from, by her [`Holding`]: Redis answers
/// for her while it holds the sale whole, so polling for an order costs MySQL nothing
/// until one exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seek {
    /// She has none (or the voucher does not exist): MySQL is not asked.
    Nowhere,
    /// MySQL's row of the order Redis recorded for her.
    Order(OrderId),
    /// Redis holds no whole sale: MySQL, by buyer and sale, once Redis says the voucher
    /// may exist ([`super::AskMysql`] without a probe).
    Mysql,
}

impl Holding {
    /// Where her order is read from.
    pub fn seek(self) -> Seek {
        match self {
            Holding::Nothing | Holding::Unknown => Seek::Nowhere,
            Holding::Order(order_id) => Seek::Order(order_id),
            Holding::Missing => Seek::Mysql,
        }
    }
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

    #[test]
    fn only_a_recorded_order_or_a_sale_redis_lost_is_read_from_mysql() {
        let order = OrderId::from_raw(77);
        assert_eq!(Holding::Order(order).seek(), Seek::Order(order));
        assert_eq!(Holding::Nothing.seek(), Seek::Nowhere);
        assert_eq!(Holding::Unknown.seek(), Seek::Nowhere);
        assert_eq!(Holding::Missing.seek(), Seek::Mysql);
    }
}
