//! A real Redis Cluster (`scripts/redis-cluster.sh`: three primaries and a replica each,
//! on loopback), started for a test and stopped when dropped, and what the tests read of
//! it: the slot map as the cluster tells it, and each node's counters.

use std::process::Command;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

use seckill_core::redis_cluster::SlotMap;
use seckill_core::sale::Keys;
use seckill_core::BucketId;

use crate::drivers::app::repo_root;

/// The six nodes' ports are BASE + 1 to BASE + 6.
const BASE: u16 = 7100;

pub struct RedisCluster;

impl RedisCluster {
    pub fn up() -> RedisCluster {
        // Made first, so that a start that fails half-way is stopped when it unwinds.
        let started = RedisCluster;
        script(&["up"], &[]);
        started
    }

    /// The seed nodes, as `redis_cluster_nodes` names them.
    pub fn seeds(&self) -> Vec<String> {
        (1..=6)
            .map(|i| format!("redis://127.0.0.1:{}", BASE + i))
            .collect()
    }

    /// `SPIN_VARIABLE_*` settings that point the component at the cluster.
    pub fn spin_env(&self) -> Vec<(String, String)> {
        spin_env(self.seeds().join(","))
    }

    /// A cluster client of the tests' own (redis-rs follows the redirects).
    pub async fn conn(&self) -> ClusterConnection {
        ClusterClient::new(self.seeds())
            .unwrap()
            .get_async_connection()
            .await
            .unwrap()
    }

    /// A connection to the node on `port` alone.
    pub async fn node(&self, port: u16) -> MultiplexedConnection {
        redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    /// The live primaries' ports.
    pub fn primaries(&self) -> Vec<u16> {
        let out = script(&["primaries"], &[]);
        out.lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect()
    }

    /// The slot map as a live primary tells it.
    pub async fn map(&self) -> SlotMap {
        let port = self.primaries()[0];
        let nodes: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut self.node(port).await)
            .await
            .unwrap();
        SlotMap::parse(&nodes).expect("a slot map")
    }

    /// The port of the primary serving `voucher`'s sale.
    pub async fn owner(&self, voucher: u64) -> u16 {
        let slot = Keys::new(BucketId::from_raw(voucher)).slot();
        let map = self.map().await;
        let node = map.owner(slot).expect("every slot is served");
        node.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// A field of a node's `INFO <section>` line `<line>:...,<field>=N,...` (0 when the
    /// line is missing: nothing counted yet).
    pub async fn stat(&self, port: u16, section: &str, line: &str, field: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.node(port).await)
            .await
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{line}:")))
            .and_then(|values| {
                values
                    .split(',')
                    .find_map(|pair| pair.strip_prefix(&format!("{field}=")))
            })
            .map_or(0, |n| n.trim().parse().unwrap())
    }

    /// Scripts a node has run (`EVALSHA` and its `EVAL` fallbacks).
    pub async fn scripts_run(&self, port: u16) -> u64 {
        let mut runs = 0;
        for command in ["cmdstat_evalsha", "cmdstat_eval"] {
            runs += self.stat(port, "commandstats", command, "calls").await;
        }
        runs
    }

    /// Errors a node answered by name (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`).
    pub async fn errors(&self, port: u16, name: &str) -> u64 {
        let line = format!("errorstat_{name}");
        self.stat(port, "errorstats", &line, "count").await
    }

    /// Kills the node on `port` (`kill -9`, a crash).
    pub fn kill(&self, port: u16) {
        script(&["kill", &port.to_string()], &[]);
    }

    /// Waits until every slot is served again (a failover done); no handle needed, so
    /// that a test can wait on another thread while its sale goes on.
    pub fn wait_until_served() {
        script(&["wait-ok"], &[]);
    }

    /// Moves `slot` and its keys to the primary on `port`, `batch` keys a `MIGRATE` and
    /// `pause` between two (the slot stays mid-migration that long), then `SETSLOT NODE`
    /// on every primary.
    pub fn migrate(&self, slot: u16, port: u16, batch: u32, pause: Duration) {
        let (batch, pause) = (batch.to_string(), pause.as_millis().to_string());
        script(
            &["migrate", &slot.to_string(), &port.to_string()],
            &[("MIGRATE_BATCH", &batch), ("MIGRATE_PAUSE_MS", &pause)],
        );
    }
}

/// `SPIN_VARIABLE_*` settings that point the component at the loopback cluster whose
/// seed nodes are `nodes` (comma-separated).
pub fn spin_env(nodes: String) -> Vec<(String, String)> {
    vec![
        ("SPIN_VARIABLE_REDIS_CLUSTER_NODES".into(), nodes),
        (
            "SPIN_VARIABLE_REDIS_ADDRESS".into(),
            "redis://127.0.0.1:*".into(),
        ),
    ]
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        script(&["down"], &[]);
    }
}

fn script(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(repo_root().join("scripts/redis-cluster.sh"))
        .args(args)
        .env("REDIS_CLUSTER_BASE", BASE.to_string())
        .envs(env.iter().copied())
        .output()
        .expect("scripts/redis-cluster.sh runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "scripts/redis-cluster.sh {args:?}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
