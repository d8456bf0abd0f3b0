//! The default build keeps no sale's buckets: an instance serves one request, so keeping
//! them would take a read of Spin's key-value store on every press of every sale, bucketed
//! or not, where asking the first bucket costs one round trip more to the presses of
//! sales in buckets alone (docs/design.md, "Buckets").

use seckill_core::buckets::Buckets;
use seckill_core::VoucherId;

/// Never known before the press asks: see the module's note.
pub fn known(_sale: VoucherId) -> Option<Buckets> {
    None
}

/// Nothing outlives the request to keep it in.
pub fn keep(_buckets: &Buckets) {}
