//! Where the default build keeps a Redis Cluster's slot map between requests: an instance
//! serves one request, so the map lives in Spin's key-value store (the host's own), and a
//! request reads it instead of asking the cluster. Only a redirect or a failed node makes
//! a request read the map again from the cluster and store it here.

use seckill_core::redis_cluster::SlotMap;
use spin_sdk::key_value::Store;

/// The key of the map, as `CLUSTER NODES` wrote it.
const KEY: &str = "seckill:redis-cluster-nodes";

/// The map the last request stored, if any.
pub fn load() -> Option<SlotMap> {
    let nodes = Store::open_default().ok()?.get(KEY).ok()??;
    SlotMap::parse(std::str::from_utf8(&nodes).ok()?)
}

/// Keeps `nodes` (`CLUSTER NODES`) for the next requests; a failure only costs them a
/// read of the map from the cluster.
pub fn store(nodes: &str) {
    if let Ok(store) = Store::open_default() {
        let _ = store.set(KEY, nodes.as_bytes());
    }
}
