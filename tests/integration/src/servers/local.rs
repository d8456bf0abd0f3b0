//! Real Redis and MariaDB, as the set-up script leaves them (see scripts/services.sh).

use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::Params;
use redis::aio::MultiplexedConnection;

pub const REDIS_URL: &str = "redis://127.0.0.1:6379";
pub const MYSQL_URL: &str = "mysql://seckill:seckill@127.0.0.1:3306/seckill";

/// [`MYSQL_URL`], or its database `SECKILL_TEST_DB` when set: a database of the run's own
/// (`DB_NAME=<it> scripts/migrate.sh`), so that procedures changed in a worktree are
/// tested apart from the shared one. Spin hosts then want `SPIN_VARIABLE_MYSQL_URL` to
/// name it too (`faults::backend_env`, for a host behind a proxy, does).
pub fn mysql_url() -> String {
    format!("mysql://seckill:seckill@127.0.0.1:3306/{}", db_name())
}

/// The database the tests use on the shared server: `SECKILL_TEST_DB`, else `seckill`.
pub fn db_name() -> String {
    std::env::var("SECKILL_TEST_DB")
        .ok()
        .filter(|db| !db.is_empty())
        .unwrap_or_else(|| "seckill".to_string())
}

pub async fn redis() -> MultiplexedConnection {
    redis::Client::open(REDIS_URL)
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("Redis at 127.0.0.1:6379 (run scripts/services.sh)")
}

/// The seed nodes of the Redis Cluster the end-to-end suites run on instead
/// (`SECKILL_REDIS_CLUSTER_NODES`, set by scripts/test-redis-cluster.sh), if any.
pub fn redis_cluster_nodes() -> Option<String> {
    std::env::var("SECKILL_REDIS_CLUSTER_NODES")
        .ok()
        .filter(|nodes| !nodes.is_empty())
}

/// A client of that cluster (redis-rs follows its redirects).
pub async fn redis_cluster(nodes: &str) -> redis::cluster_async::ClusterConnection {
    redis::cluster::ClusterClient::new(nodes.split(',').collect::<Vec<_>>())
        .expect("cluster seed urls")
        .get_async_connection()
        .await
        .expect("the Redis Cluster at SECKILL_REDIS_CLUSTER_NODES")
}

pub fn mysql() -> mysql_async::Pool {
    mysql_async::Pool::new(mysql_url().as_str())
}

/// A connection to the MySQL at `url`, waiting (up to 10 s) while it turns new ones away
/// as too many (1040): suites running at once can fill it for a moment.
pub async fn connect_to(url: &str) -> Result<mysql_async::Conn, mysql_async::Error> {
    let mut tries = 0;
    loop {
        match mysql_async::Conn::from_url(url).await {
            Err(mysql_async::Error::Server(error)) if error.code == 1040 && tries < 100 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            result => return result,
        }
    }
}

/// Every row a query returns from the MySQL at `url`, on a connection of its own (a
/// test's one look at MySQL, with nothing left open behind it).
pub async fn rows_at<T: FromRow + Send + 'static>(
    url: &str,
    sql: &str,
    params: impl Into<Params> + Send,
) -> Vec<T> {
    let mut conn = connect_to(url).await.unwrap();
    let rows = conn.exec(sql, params).await.unwrap();
    conn.disconnect().await.unwrap();
    rows
}

/// [`rows_at`] the tests' MySQL.
pub async fn mysql_rows<T: FromRow + Send + 'static>(
    sql: &str,
    params: impl Into<Params> + Send,
) -> Vec<T> {
    rows_at(&mysql_url(), sql, params).await
}

/// The first row, likewise.
pub async fn mysql_first<T: FromRow + Send + 'static>(
    sql: &str,
    params: impl Into<Params> + Send,
) -> Option<T> {
    mysql_rows(sql, params).await.into_iter().next()
}

/// Runs one statement, likewise.
pub async fn mysql_exec(sql: &str, params: impl Into<Params> + Send) {
    let _: Vec<mysql_async::Row> = mysql_rows(sql, params).await;
}

/// A voucher id no other test (or earlier run) uses, and MySQL never hands out: a made-up
/// id. Redis is never given a sale under one (see `scripts::Sale::created`).
pub fn fresh_voucher_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{SystemTime, UNIX_EPOCH};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    // Far above MySQL's auto-increment ids, and distinct within and across runs.
    (1 << 40) + (nanos >> 10) % (1 << 40) + NEXT.fetch_add(1, Ordering::Relaxed)
}
