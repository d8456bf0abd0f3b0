//! What more than one of these suites writes: an answer that is its decision alone, a
//! check that a press was admitted, and the terms of a sale under way.

use seckill_core::sale::{Admission, Decision, Terms};
use seckill_tests::drivers::scripts;

/// An answer that does not come with the lease.
pub fn plain(decision: Decision) -> Admission {
    Admission::plain(decision)
}

/// Asserts that a press was admitted, whatever its ticket.
#[track_caller]
pub fn assert_admitted(admission: &Admission) {
    assert!(
        matches!(admission.decision, Decision::Admitted(_)),
        "{admission:?}"
    );
}

/// Terms of a sale first come, first served, one unit a buyer, that began a minute before
/// `now_ms` and ends `ends_in_ms` after it.
pub fn terms_at(now_ms: i64, ends_in_ms: i64, stock: u64, initial_stock: u64) -> Terms {
    Terms {
        initial_stock,
        ..scripts::terms(stock, now_ms - 60_000, now_ms + ends_in_ms)
    }
}
