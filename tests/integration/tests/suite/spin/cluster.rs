//! Several Spin hosts behind a real load balancer, with Redis as a primary, a replica and
//! a Sentinel (`scripts/cluster.sh`): a sale whose hosts are killed under it, one whose
//! Redis primary dies, and a crowd above one host's instance cap. Ignored by `cargo test`
//! (they need HAProxy and Sentinel); `scripts/test-cluster.sh` runs the first two at a
//! bounded size (CI does), and `scripts/test-cluster.sh --soak` all three at full size.

use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};

use seckill_core::BucketId;
use seckill_tests::drivers::app::{repo_root, ADMIN_TOKEN, JWT_SECRET};
use seckill_tests::drivers::crowd::{assert_promises, sale, size, Storefront};
use seckill_tests::drivers::invariants::{self, SaleRecord};
use seckill_tests::drivers::scripts::RowLock;

const BALANCER: &str = "http://127.0.0.1:3180";
const REDIS_PROXY: &str = "redis://127.0.0.1:6480";
const HOSTS: usize = 3;

/// The topology, started for a test and stopped when dropped.
struct Cluster;

impl Cluster {
    fn up() -> Cluster {
        // Made first, so that a start that fails half-way is stopped when it unwinds.
        let started = Cluster;
        cluster(&["up", &HOSTS.to_string()]);
        started
    }

    fn kill_host(&self, host: usize) {
        cluster(&["kill-host", &host.to_string()]);
    }

    fn start_host(&self, host: usize) {
        cluster(&["start-host", &host.to_string()]);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        cluster(&["down"]);
    }
}

fn cluster(args: &[&str]) {
    let status = Command::new(repo_root().join("scripts/cluster.sh"))
        .args(args)
        .env("SPIN_VARIABLE_JWT_SECRET", JWT_SECRET)
        .env("SPIN_VARIABLE_ADMIN_TOKEN", ADMIN_TOKEN)
        .status()
        .expect("scripts/cluster.sh runs");
    assert!(status.success(), "scripts/cluster.sh {args:?}: {status}");
}

async fn connect(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn read(voucher: u64) -> SaleRecord {
    let redis = connect(REDIS_PROXY).await;
    invariants::read_with(voucher, redis).await
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs scripts/cluster.sh's topology: run scripts/test-cluster.sh"]
async fn hosts_killed_mid_sale_keep_every_promise() {
    let cluster = Cluster::up();
    let front = Storefront::new(BALANCER);
    let (stock, buyers, spread) = size((400, 2400, 4), (150, 900, 3));
    let voucher = front.create_voucher(stock).await;

    // Every host dies while the voucher's drainer is inside its group commit: MySQL's
    // stock row is held, so the first drainer waits in its CALL when the hosts are killed.
    let lock = RowLock::hold(BucketId::from_raw(voucher)).await;
    let sale = sale(&front, voucher, 1_000_000, buyers, spread, 600);
    let mut redis = connect(REDIS_PROXY).await;
    let lease = seckill_core::sale::Keys::new(BucketId::from_raw(voucher)).lease();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let held: bool = redis::AsyncCommands::exists(&mut redis, &lease)
            .await
            .unwrap();
        if held {
            break;
        }
        assert!(Instant::now() < deadline, "nobody took the lease");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for host in 1..=HOSTS {
        cluster.kill_host(host);
    }
    lock.release().await;
    for host in 1..=HOSTS {
        cluster.start_host(host);
    }

    // Then two hosts die, one after the other, and come back.
    tokio::time::sleep(Duration::from_millis(700)).await;
    cluster.kill_host(1);
    tokio::time::sleep(Duration::from_millis(700)).await;
    cluster.kill_host(2);
    cluster.start_host(1);
    tokio::time::sleep(Duration::from_millis(700)).await;
    cluster.start_host(2);

    let finals = sale.await.unwrap();
    assert_promises(&front, voucher, stock, &finals, read).await;
}

/// Sends a signal to the process whose pid is in target/cluster/`pidfile`.
fn signal(pidfile: &str, signal: &str) {
    let pid = std::fs::read_to_string(repo_root().join("target/cluster").join(pidfile)).unwrap();
    let status = Command::new("kill")
        .args([signal, pid.trim()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs scripts/cluster.sh's topology: run scripts/test-cluster.sh"]
async fn the_redis_primary_dies_mid_sale_and_the_replica_takes_over() {
    let _cluster = Cluster::up();
    let front = Storefront::new(BALANCER);
    // Units enough to be selling still when the primary dies.
    let (stock, buyers, spread) = size((1500, 2400, 4), (700, 1100, 3));
    let voucher = front.create_voucher(stock).await;
    let sale = sale(&front, voucher, 2_000_000, buyers, spread, 600);

    // The replica falls behind (its link cut again and again while the sale writes),
    // then the primary dies with writes the replica never received: Sentinel promotes
    // the replica, and the proxy follows it. What the replica missed is gone.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut primary = connect("redis://127.0.0.1:6481").await;
    for _ in 0..8 {
        let _: redis::RedisResult<i64> = redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", "replica"])
            .query_async(&mut primary)
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal("redis-6481.pid", "-KILL");
    let died = Instant::now();

    // The admin watches /health and syncs the voucher once it is listed as stale (Redis
    // found behind MySQL), as operations.md says; the sale goes on after it.
    let mut synced = None;
    while synced.is_none() && !sale.is_finished() && Instant::now() < died + Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if front.health_lists("stale_vouchers", voucher).await {
            let path = format!("/vouchers/{voucher}/sync");
            let (status, body) = front
                .call(Method::POST, &path, ADMIN_TOKEN, None)
                .await
                .unwrap();
            assert_eq!(status, StatusCode::OK, "{body}");
            synced = Some(died.elapsed());
        }
    }
    let finals = sale.await.unwrap();
    println!("Redis primary killed; the admin's sync after {synced:?}");
    // Whether the replica missed an order's record (and the sale waited for the sync) or
    // only admissions, which Redis and MySQL settle without one, depends on where the
    // replication stream stood: the promises hold either way.
    assert_promises(&front, voucher, stock, &finals, read).await;
}

/// Spin's Redis floor (the benchmark's floor component: a Redis connection and a PING)
/// through the same balancer, by wrk at `connections` for 3 s: requests a second.
fn floor_through_the_balancer(connections: usize) -> f64 {
    let out = Command::new("wrk")
        .args([
            "-t2",
            &format!("-c{connections}"),
            "-d3s",
            "http://127.0.0.1:3190/redis",
        ])
        .output()
        .expect("wrk (scripts/test-cluster.sh installs it)");
    let out = String::from_utf8_lossy(&out.stdout);
    out.lines()
        .find_map(|line| line.strip_prefix("Requests/sec:"))
        .and_then(|rate| rate.trim().parse().ok())
        .unwrap_or_else(|| panic!("no rate in wrk's output: {out}"))
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs scripts/cluster.sh's topology: run scripts/test-cluster.sh"]
async fn a_crowd_above_one_hosts_cap_sells_through_the_balancer() {
    let _cluster = Cluster::up();
    let front = Storefront::new(BALANCER);
    // More requests in flight than one host's default cap (1,000), spread over the
    // hosts by the balancer, which keeps each at a few hundred and queues the rest.
    let connections = 3000;
    let floor = floor_through_the_balancer(connections);
    let (stock, buyers) = (3000, 12_000);
    let voucher = front.create_voucher(stock).await;
    let opened = Instant::now();
    let finals = sale(
        &front,
        voucher,
        3_000_000,
        buyers,
        Duration::from_millis(500),
        connections,
    )
    .await
    .unwrap();
    let last_answer = opened.elapsed().as_secs_f64();
    let presses: usize = finals.iter().map(|(_, f)| f.presses).sum();
    println!(
        "a crowd of {connections} through the balancer: the last answer {last_answer:.2} s \
         after the opening, {:.2} presses per buyer; Spin's Redis floor through the same \
         balancer {floor:.0} req/s; ratio {:.2}",
        presses as f64 / buyers as f64,
        last_answer * floor / buyers as f64
    );
    // How many presses met a 5xx on the way depends on the machine's pace under a crowd
    // this size (assert_promises prints them by status); what must hold is that every
    // buyer ends with her answer and the sale's promises.
    assert_promises(&front, voucher, stock, &finals, read).await;
}
