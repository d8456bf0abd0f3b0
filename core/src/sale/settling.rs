//! Turns at settling orders (a payment, a cancellation): one settle at a time per Redis
//! Cluster slot of the orders' vouchers, which each order id carries
//! ([`OrderId::slot`]), so that a turn is taken before MySQL is asked anything.
//!
//! A settle that gives a unit back writes its bucket's stock row. On a Galera cluster with
//! every node writing, such writes from several nodes at once abort one another at
//! certification, and a node whose applier waits on the lock of a local transaction
//! caught certifying under flow control stalls the whole cluster for tens of seconds
//! (MariaDB 10.11, Galera 4: docs/operations.md). Taking turns in Redis leaves each stock
//! row one settling writer at a time, beside the bucket's one drainer and one sweep.
//! A settle that finds the turn taken blocks for the wake-up its holder leaves when it
//! hands the turn on ([`AwaitTurn`], [`super::EndTurn`]), so the turns follow one another
//! with no pause between them.

use crate::order_id::OrderId;
use crate::redis::{Command, Reply, UnexpectedReply};
use crate::redis_cluster::slot_tag;

use super::{parse_set_nx, set_nx, Call, SETTLE_TURN_MS};

/// How long a settle blocks for a wake-up before it looks at the turn again (a holder
/// that died leaves none), in seconds as `BLPOP` takes them.
const TURN_SLICE: &str = "0.05";

/// The key of a slot's turn at settling, holding its holder's token. It sits in the slot
/// itself on a Redis Cluster; on one Redis the tag only keeps slots apart.
pub(super) fn settling(order_id: OrderId) -> String {
    format!("seckill:{{{}}}:settling", slot_tag(order_id.slot()))
}

/// The list a handed-on turn leaves its wake-up in.
pub(super) fn wake(order_id: OrderId) -> String {
    format!("{}-wake", settling(order_id))
}

/// Takes the turn of `order_id`'s slot under `token` for [`SETTLE_TURN_MS`]: whether it
/// was free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeTurn<'a> {
    pub order_id: OrderId,
    pub token: &'a str,
}

impl Call for TakeTurn<'_> {
    type Output = bool;

    fn command(&self) -> Command {
        set_nx(settling(self.order_id), self.token, SETTLE_TURN_MS)
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        parse_set_nx(reply)
    }
}

/// Blocks up to [`TURN_SLICE`] for the wake-up of a turn handed on: whether one came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AwaitTurn {
    pub order_id: OrderId,
}

impl Call for AwaitTurn {
    type Output = bool;

    fn command(&self) -> Command {
        Command::plain("BLPOP", vec![wake(self.order_id).into(), TURN_SLICE.into()])
    }

    fn parse(reply: Vec<Reply>) -> Result<bool, UnexpectedReply> {
        match reply.as_slice() {
            [] | [Reply::Nil] => Ok(false),
            [Reply::Bytes(_key), Reply::Bytes(_)] => Ok(true),
            _ => Err(UnexpectedReply(reply)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis_cluster::key_slot;
    use crate::sale::Keys;
    use crate::BucketId;

    #[test]
    fn an_order_s_turn_is_its_voucher_s_slot() {
        for voucher in [1u64, 42, 9_999_999] {
            let slot = Keys::new(BucketId::from_raw(voucher)).slot();
            let order =
                OrderId::compose(crate::order_id::EPOCH + 9, i64::from(slot) << 18 | 77).unwrap();
            assert_eq!(order.slot(), slot);
            assert_eq!(key_slot(settling(order).as_bytes()), slot);
            assert_eq!(key_slot(wake(order).as_bytes()), slot);
        }
    }
}
