//! MySQL's word on the purchases of a group commit (`seckill_commit_batch` in
//! `migrations/002_procedures.sql`).

use crate::ids::UserId;
use crate::order_id::OrderId;

/// Commits a batch of one voucher's purchases in one transaction: the voucher's id, and
/// the batch as [`batch_json`]. Returns a row per purchase, in order: its order id, the
/// buyer's order of the voucher if any, whether any order has its id, and the voucher's
/// orders once the batch committed.
pub const COMMIT_BATCH: &str = "CALL seckill_commit_batch(?, ?)";

/// The batch `(order id, buyer)` as [`COMMIT_BATCH`] takes it: a JSON array of
/// `["<order id>", "<user id>"]`, strings so that no id loses digits.
pub fn batch_json(batch: &[(OrderId, UserId)]) -> String {
    let pairs: Vec<[String; 2]> = batch
        .iter()
        .map(|(order_id, user)| [order_id.to_string(), user.to_string()])
        .collect();
    serde_json::to_string(&pairs).expect("strings encode")
}

/// MySQL's verdict on one queued purchase of a group commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its order is committed.
    Ordered,
    /// The buyer holds this other order of the voucher; nothing was taken.
    Duplicate(OrderId),
    /// No unit was left; nothing was taken.
    SoldOut,
    /// Its order id is another order's (see docs/design.md, "Order ids"); nothing was taken.
    IdTaken,
}

impl Verdict {
    /// From `seckill_commit_batch`'s row for the purchase `order_id`: the buyer's order
    /// of the voucher, if any, and whether any order has the id `order_id`.
    pub fn of(order_id: OrderId, held: Option<OrderId>, id_used: bool) -> Verdict {
        match held {
            Some(held) if held == order_id => Verdict::Ordered,
            Some(held) => Verdict::Duplicate(held),
            None if id_used => Verdict::IdTaken,
            None => Verdict::SoldOut,
        }
    }
}

/// What a batch's commit decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// MySQL's verdict on each purchase, in the batch's order.
    pub verdicts: Vec<Verdict>,
    /// The voucher's orders in MySQL once the batch's transaction committed.
    pub orders: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_order_mysql_holds_for_the_buyer() {
        let (mine, other) = (OrderId::from_raw(5), OrderId::from_raw(6));
        assert_eq!(Verdict::of(mine, Some(mine), true), Verdict::Ordered);
        assert_eq!(
            Verdict::of(mine, Some(other), false),
            Verdict::Duplicate(other)
        );
        assert_eq!(
            Verdict::of(mine, Some(other), true),
            Verdict::Duplicate(other)
        );
        assert_eq!(Verdict::of(mine, None, true), Verdict::IdTaken);
        assert_eq!(Verdict::of(mine, None, false), Verdict::SoldOut);
    }
}
