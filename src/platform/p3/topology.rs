//! Where the WASIp3 build keeps a Redis Cluster's slot map: in the instance, for the
//! requests it serves after the one that read it. Only a redirect or a failed node makes a
//! request read it again from the cluster.

use std::cell::RefCell;

use seckill_core::redis_cluster::SlotMap;

thread_local! {
    static MAP: RefCell<Option<SlotMap>> = const { RefCell::new(None) };
}

/// The map the instance keeps, if any.
pub fn load() -> Option<SlotMap> {
    MAP.with_borrow(Clone::clone)
}

/// Keeps `nodes` (`CLUSTER NODES`) for the instance's next requests.
pub fn store(nodes: &str) {
    MAP.set(SlotMap::parse(nodes));
}
