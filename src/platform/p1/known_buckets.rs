//! Where the default build keeps the buckets of the sales its presses learnt them for, on
//! a Redis Cluster: in Spin's key-value store (the host's own, beside the slot map), so
//! that a press goes straight to its buyer's bucket, on its own primary, instead of
//! asking the first bucket for the others on every press (docs/design.md, "Buckets").
//! With one Redis every bucket is on the same server, and a read of the store on every
//! press of every sale costs more than the first bucket's answer costs the presses of
//! bucketed sales (BENCHMARKS.md: about a tenth of a sold-out press): nothing is kept.
//! A sale's buckets never change once created, but an id MySQL hands out again names
//! another sale: the list is kept with its sale's creation, and a press it routes is
//! admitted only by buckets of that creation.

use spin_sdk::key_value::Store;

use seckill_core::buckets::{list_ids, parse_ids, Buckets};
use seckill_core::SaleId;

fn key(sale: SaleId) -> String {
    format!("seckill:buckets:{sale}")
}

/// Whether a press's buckets are kept: on a Redis Cluster only.
pub fn keeps(on_a_cluster: bool) -> bool {
    on_a_cluster
}

/// The buckets of `sale`, if a press of this host learnt them on a cluster.
pub fn known(sale: SaleId, on_a_cluster: bool) -> Option<Buckets> {
    if !on_a_cluster {
        return None;
    }
    let kept = Store::open_default().ok()?.get(&key(sale)).ok()??;
    let (created, ids) = std::str::from_utf8(&kept).ok()?.split_once(';')?;
    let (created, ids) = (created.parse().ok()?, parse_ids(ids)?);
    let (first, others) = ids.split_first()?;
    (*first == sale.first_bucket()).then(|| Buckets::new(sale, others).with_created(created))
}

/// Keeps the buckets a press learnt (`<created>;<id>,<id>...`); a failure only costs the
/// next presses the first bucket's answer.
pub fn keep(buckets: &Buckets, on_a_cluster: bool) {
    if !on_a_cluster {
        return;
    }
    if let Ok(store) = Store::open_default() {
        let kept = format!("{};{}", buckets.created(), list_ids(buckets.all()));
        let _ = store.set(&key(buckets.sale()), kept.as_bytes());
    }
}
