//! MySQL's ledger of a voucher's stock, and the units given back to it, shared by the
//! statements that read them and the calls that hand them to Redis.

use crate::ids::UserId;
use crate::order_id::OrderId;

/// What MySQL's stock of a voucher counts, read with it: a load installs both with the
/// stock, so that Redis counts nothing twice after a loss; a publication learns both
/// from its batch's commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ledger {
    /// The last of the voucher's units given back that the stock counts (an event id):
    /// `restock.lua` applies only the returns after it.
    pub returned_event: u64,
    /// The voucher's orders, whatever became of them since: publish.lua compares them
    /// with those Redis has learnt of.
    pub orders: u64,
    /// The units left: a publication whose purchase MySQL found no units for sets Redis's
    /// stock by them.
    pub stock: u64,
}

/// Units given back to the sale: its event id, and what gave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Returned {
    pub event: u64,
    pub kind: ReturnKind,
    /// The order's units, all given back, or those a restock added to the bucket.
    pub units: u32,
}

/// What gave units back: an order's end (its buyer and the order), or the merchant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReturnKind {
    Cancelled {
        order_id: OrderId,
        user: UserId,
    },
    Expired {
        order_id: OrderId,
        user: UserId,
    },
    /// More units for the sale (`seckill_change_sale`).
    Restocked,
}
