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

/// A unit given back: its event id, the order and buyer, and whether it was cancelled
/// (else it expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Returned {
    pub event: u64,
    pub order_id: OrderId,
    pub user: UserId,
    pub cancelled: bool,
    /// The order's units, all given back.
    pub units: u32,
}
