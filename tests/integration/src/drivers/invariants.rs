//! The promises of a sale, checked against what MySQL and Redis hold afterwards.

use std::collections::{HashMap, HashSet};

use mysql_async::prelude::Queryable;
use redis::aio::ConnectionLike;
use redis::AsyncCommands;
use seckill_core::sale::Keys;
use seckill_core::BucketId;

use crate::servers::local::{mysql, redis, redis_cluster, redis_cluster_nodes};

/// What a sale left behind in MySQL and Redis, over all its buckets.
#[derive(Debug, PartialEq, Eq)]
pub struct SaleRecord {
    pub initial_stock: u64,
    pub mysql_stock: u64,
    /// Each bucket (the voucher alone but for a sale of several): its id, its stock in
    /// MySQL and in Redis.
    pub buckets: Vec<(u64, u64, Option<i64>)>,
    /// order id -> user id, from `tb_voucher_order`.
    pub orders: HashMap<u64, u64>,
    /// order id -> status (1 unpaid, 2 paid, 4 cancelled, 7 expired, ...).
    pub statuses: HashMap<u64, u8>,
    /// order id -> its units.
    pub quantities: HashMap<u64, u64>,
    /// The most units one buyer may hold in the sale.
    pub per_buyer: u64,
    /// The buckets' Redis stock together; `None` when a bucket has none.
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
    let lease = Keys::new(BucketId::from_raw(voucher_id)).lease();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    while redis.exists::<_, bool>(&lease).await.unwrap() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// [`read`], with the sale's Redis state read through `redis` (another server's, or a
/// Redis Cluster's).
pub async fn read_with(voucher_id: u64, redis: impl ConnectionLike + Send + Sync) -> SaleRecord {
    read_on(voucher_id, mysql(), redis).await
}

/// [`read_with`], with MySQL read through `pool` (a server or a cluster of the test's own).
pub async fn read_on(
    voucher_id: u64,
    pool: mysql_async::Pool,
    mut redis: impl ConnectionLike + Send + Sync,
) -> SaleRecord {
    let mut conn = pool.get_conn().await.unwrap();
    let rows: Vec<(u64, u64, u64, u64)> = conn
        .exec(
            "SELECT voucher_id, initial_stock, stock, per_buyer FROM tb_seckill_voucher \
             WHERE sale_id = ? ORDER BY voucher_id",
            (voucher_id,),
        )
        .await
        .unwrap();
    assert!(!rows.is_empty(), "voucher {voucher_id} in MySQL");
    let mut buckets = Vec::new();
    let mut redis_queued = 0;
    for &(bucket, _, mysql_stock, _) in &rows {
        after_drainer(&mut redis, bucket).await;
        let keys = Keys::new(BucketId::from_raw(bucket));
        let redis_stock: Option<i64> = redis.hget(keys.voucher(), "stock").await.unwrap();
        redis_queued += redis.llen::<_, u64>(keys.queue()).await.unwrap();
        buckets.push((bucket, mysql_stock, redis_stock));
    }
    let initial_stock = rows.iter().map(|row| row.1).sum();
    let mysql_stock = rows.iter().map(|row| row.2).sum();
    let redis_stock = buckets.iter().map(|bucket| bucket.2).sum();
    let per_buyer = rows[0].3;
    let rows: Vec<(u64, u64, u8, u64)> = conn
        .exec(
            "SELECT id, user_id, status, quantity FROM tb_voucher_order WHERE sale_id = ?",
            (voucher_id,),
        )
        .await
        .unwrap();
    drop(conn);
    pool.disconnect().await.unwrap();
    SaleRecord {
        initial_stock,
        mysql_stock,
        buckets,
        orders: rows.iter().map(|(id, user, ..)| (*id, *user)).collect(),
        statuses: rows
            .iter()
            .map(|(id, _, status, _)| (*id, *status))
            .collect(),
        quantities: rows.iter().map(|(id, .., units)| (*id, *units)).collect(),
        per_buyer,
        redis_stock,
        redis_queued,
    }
}

impl SaleRecord {
    /// Checks what must hold after any sale, faults or not, given the orders the
    /// component acknowledged with 201 as (order id, user id). Panics with the reason.
    pub fn assert_sound(&self, acknowledged: &[(u64, u64)]) {
        let units = self.live_units();
        assert!(
            units <= self.initial_stock,
            "oversold: {units} units in live orders for {} units",
            self.initial_stock
        );
        assert_eq!(
            self.mysql_stock + units,
            self.initial_stock,
            "MySQL stock {} + {units} units in live orders != initial stock {}",
            self.mysql_stock,
            self.initial_stock
        );
        for (order_id, units) in &self.quantities {
            assert!(
                (1..=self.per_buyer).contains(units),
                "order {order_id} of {units} units; the sale lets a buyer hold {}",
                self.per_buyer
            );
        }
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

    /// Orders that hold their units: neither cancelled nor expired.
    pub fn live_orders(&self) -> u64 {
        self.live().count() as u64
    }

    /// The units the live orders hold.
    pub fn live_units(&self) -> u64 {
        self.live().map(|order_id| self.quantities[order_id]).sum()
    }

    fn live(&self) -> impl Iterator<Item = &u64> {
        self.statuses
            .iter()
            .filter(|(_, status)| !matches!(status, 4 | 7))
            .map(|(order_id, _)| order_id)
    }

    /// Nothing is queued, and every bucket's Redis stock is MySQL's.
    pub fn settled(&self) -> bool {
        self.redis_queued == 0
            && self
                .buckets
                .iter()
                .all(|(_, mysql, redis)| *redis == Some(*mysql as i64))
    }

    /// A sale over, nothing in flight: [`SaleRecord::assert_sound`], and Redis agrees with
    /// MySQL ([`SaleRecord::assert_redis_agrees`]).
    pub fn assert_settled(&self, acknowledged: &[(u64, u64)]) {
        self.assert_sound(acknowledged);
        self.assert_redis_agrees();
    }

    /// Once nothing is in flight, Redis must agree with MySQL: no unit lost, none extra.
    pub fn assert_redis_agrees(&self) {
        assert_eq!(self.redis_queued, 0, "purchases still queued");
        for &(bucket, mysql_stock, redis_stock) in &self.buckets {
            assert_eq!(
                redis_stock,
                Some(mysql_stock as i64),
                "bucket {bucket}: Redis stock disagrees with MySQL"
            );
        }
    }
}
