//! Where the WASIp3 build keeps the buckets of the sales it has pressed for: in the
//! instance, so that its next presses of a sale of several buckets go straight to the
//! buyer's (docs/design.md, "Buckets"). A sale's buckets never change once created, but
//! an id MySQL hands out again names another sale: the list is kept with its sale's
//! creation, and a press it routes is admitted only by buckets of that creation.

use std::cell::RefCell;
use std::collections::HashMap;

use seckill_core::buckets::Buckets;
use seckill_core::SaleId;

/// Most sales kept: a flood of made-up ids cannot grow the instance past this.
const KEPT: usize = 4096;

thread_local! {
    static SALES: RefCell<HashMap<SaleId, Buckets>> = RefCell::new(HashMap::new());
}

/// Whether a press's buckets are kept: on one Redis or a cluster alike, as the instance's
/// memory costs no read.
pub fn keeps(_on_a_cluster: bool) -> bool {
    true
}

/// The buckets of `sale`, if a press of this instance learnt them.
pub fn known(sale: SaleId, _on_a_cluster: bool) -> Option<Buckets> {
    SALES.with_borrow(|sales| sales.get(&sale).cloned())
}

/// Keeps the buckets a press learnt.
pub fn keep(buckets: &Buckets, _on_a_cluster: bool) {
    SALES.with_borrow_mut(|sales| {
        if sales.len() < KEPT {
            sales.insert(buckets.sale(), buckets.clone());
        }
    });
}
