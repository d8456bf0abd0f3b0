//! What more than one of these suites writes: an answer that is its decision alone, and
//! the terms of a sale under way.

use seckill_core::sale::{Admission, Decision, Terms};

/// An answer that does not come with the lease.
pub fn plain(decision: Decision) -> Admission {
    Admission {
        decision,
        lease: None,
        sweep: false,
        sweeping: false,
        others: Vec::new(),
        seen_out: Vec::new(),
        left: 0,
    }
}

/// Terms of a sale first come, first served, one unit a buyer, that began a minute before
/// `now_ms` and ends `ends_in_ms` after it.
pub fn terms_at(now_ms: i64, ends_in_ms: i64, stock: u64, initial_stock: u64) -> Terms {
    Terms {
        stock,
        begin_ms: now_ms - 60_000,
        end_ms: now_ms + ends_in_ms,
        initial_stock,
        title: "voucher".into(),
        description: String::new(),
        pay_within_s: 900,
        draw_ms: 0,
        per_buyer: 1,
        announce_ms: 0,
    }
}
