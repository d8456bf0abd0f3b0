//! Real Redis and MariaDB, as the set-up script leaves them (see scripts/services.sh).

use redis::aio::MultiplexedConnection;

pub const REDIS_URL: &str = "redis://127.0.0.1:6379";
pub const MYSQL_URL: &str = "mysql://seckill:seckill@127.0.0.1:3306/seckill";

pub async fn redis() -> MultiplexedConnection {
    redis::Client::open(REDIS_URL)
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("Redis at 127.0.0.1:6379 (run scripts/services.sh)")
}

pub fn mysql() -> mysql_async::Pool {
    mysql_async::Pool::new(MYSQL_URL)
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
