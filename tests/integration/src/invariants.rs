//! The promises of a sale, checked against what MySQL and Redis hold afterwards.

use std::collections::{HashMap, HashSet};

use mysql_async::prelude::Queryable;
use redis::aio::ConnectionLike;
use redis::AsyncCommands;
use seckill_core::sale::Keys;
use seckill_core::VoucherId;

use crate::backends::{mysql, redis, redis_cluster, redis_cluster_nodes};

/// What a sale left behind in MySQL and Redis.
#[derive(Debug, PartialEq, Eq)]
pub struct SaleRecord {
    pub initial_stock: u64,
    pub mysql_stock: u64,
    /// order id -> user id, from `tb_voucher_order`.
    pub orders: HashMap<u64, u64>,
    /// order id -> status (1 unpaid, 2 paid, 4 cancelled, 7 expired, ...).
    pub statuses: HashMap<u64, u8>,
    pub redis_stock: Option<i64>,
    /// Purchases still queued in Redis, admitted and not yet published.
    pub redis_queued: u64,
}

/// What a sale left behind, its Redis state read where the component keeps it (the
/// shared Redis, or the Redis Cluster the suites run on).
pub async fn read(voucher_id: u64) -> SaleRecord {
    match redis_cluster_nodes() {
        Some(nodes) => read_with(voucher_id, redis_cluster(&nodes).await).await,
        None => read_with(voucher_id, redis().await).await,
    }
}

/// Waits (3 s at most) while a drainer holds the voucher's lease: a buyer's `201` leaves
/// before her batch's publication, which ends with the lease's release, so a record read
/// right after it could still show her purchase queued.
pub async fn after_drainer(redis: &mut (impl ConnectionLike + Send + Sync), voucher_id: u64) {
    let lease = Keys::new(VoucherId::from_raw(voucher_id)).lease();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    while redis.exists::<_, bool>(&lease).await.unwrap() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// [`read`], with the sale's Redis state read through `redis` (another server's, or a
/// Redis Cluster's).
pub async fn read_with(
    voucher_id: u64,
    mut redis: impl ConnectionLike + Send + Sync,
) -> SaleRecord {
    after_drainer(&mut redis, voucher_id).await;
    let pool = mysql();
    let mut conn = pool.get_conn().await.unwrap();
    let (initial_stock, mysql_stock): (u64, u64) = conn
        .exec_first(
            "SELECT initial_stock, stock FROM tb_seckill_voucher WHERE voucher_id = ?",
            (voucher_id,),
        )
        .await
        .unwrap()
        .expect("voucher in MySQL");
    let rows: Vec<(u64, u64, u8)> = conn
        .exec(
            "SELECT id, user_id, status FROM tb_voucher_order WHERE voucher_id = ?",
            (voucher_id,),
        )
        .await
        .unwrap();
    drop(conn);
    pool.disconnect().await.unwrap();
    let keys = Keys::new(VoucherId::from_raw(voucher_id));
    let redis_stock: Option<i64> = redis.hget(keys.voucher(), "stock").await.unwrap();
    let redis_queued: u64 = redis.llen(keys.queue()).await.unwrap();
    SaleRecord {
        initial_stock,
        mysql_stock,
        orders: rows.iter().map(|(id, user, _)| (*id, *user)).collect(),
        statuses: rows.iter().map(|(id, _, status)| (*id, *status)).collect(),
        redis_stock,
        redis_queued,
    }
}

impl SaleRecord {
    /// Checks what must hold after any sale, faults or not, given the orders the
    /// component acknowledged with 201 as (order id, user id). Panics with the reason.
    pub fn assert_sound(&self, acknowledged: &[(u64, u64)]) {
        let orders = self.live_orders();
        assert!(
            orders <= self.initial_stock,
            "oversold: {orders} live orders for {} units",
            self.initial_stock
        );
        assert_eq!(
            self.mysql_stock + orders,
            self.initial_stock,
            "MySQL stock {} + {orders} live orders != initial stock {}",
            self.mysql_stock,
            self.initial_stock
        );
        let buyers: HashSet<u64> = self.orders.values().copied().collect();
        assert_eq!(buyers.len(), self.orders.len(), "a buyer holds two orders");
        let acknowledged_ids: HashSet<u64> = acknowledged.iter().map(|(id, _)| *id).collect();
        assert_eq!(
            acknowledged_ids.len(),
            acknowledged.len(),
            "an order id was acknowledged twice"
        );
        for (order_id, user_id) in acknowledged {
            assert_eq!(
                self.orders.get(order_id),
                Some(user_id),
                "acknowledged order {order_id} of buyer {user_id} is not in MySQL"
            );
        }
    }

    /// Orders that hold a unit: neither cancelled nor expired.
    pub fn live_orders(&self) -> u64 {
        self.statuses
            .values()
            .filter(|status| !matches!(status, 4 | 7))
            .count() as u64
    }

    /// Once nothing is in flight, Redis must agree with MySQL: no unit lost, none extra.
    pub fn assert_redis_agrees(&self) {
        assert_eq!(self.redis_queued, 0, "purchases still queued");
        assert_eq!(
            self.redis_stock,
            Some(self.mysql_stock as i64),
            "Redis stock disagrees with MySQL"
        );
    }
}
