//! A sale's all-out marks against units coming back (docs/design.md, "Units that come back
//! reopen every bucket"), with the component's own purchases and restocks on the shared
//! Redis and MariaDB: no mark resting on what was seen before units came back stands after
//! their restock, however its walk was timed, and no mark handed on outlives the first.

use std::time::Duration;

use redis::AsyncCommands;

use seckill_core::buckets::Buckets;
use seckill_core::drive;
use seckill_core::purchase::{Io, Receipt};
use seckill_core::redis::Command;
use seckill_core::returns::Returns;
use seckill_core::sale::{Keys, Limits};
use seckill_core::{ApiError, BucketId, OrderId, UserId};
use seckill_tests::drivers::purchases::{InFlight, SaleBackend};
use seckill_tests::drivers::scripts::{self, Sale};

/// A sale of a unit a bucket: buyer `k`'s bucket is the `k % n`-th.
struct Buckets1 {
    sales: Vec<Sale>,
    buckets: Buckets,
}

impl Buckets1 {
    async fn new(n: u32) -> Buckets1 {
        let sales = Sale::live_buckets(n, n).await;
        let ids: Vec<BucketId> = sales.iter().map(|sale| sale.voucher).collect();
        Buckets1 {
            buckets: Buckets::new(sales[0].sale(), &ids[1..]),
            sales,
        }
    }

    fn start(&self, buyer: u64) -> InFlight {
        InFlight::knowing(
            self.buckets.clone(),
            UserId::from_raw(buyer),
            1,
            Limits::SHIPPED,
        )
    }

    async fn press(&self, buyer: u64) -> Result<Receipt, ApiError> {
        self.start(buyer)
            .run(&self.sales[0], 10_000)
            .await
            .expect("an answer")
    }

    /// The buyer cancels her order, and its restock runs to its end.
    async fn cancel(&self, buyer: u64, order: OrderId) {
        let settled = scripts::cancel_order(order, UserId::from_raw(buyer)).await;
        let bucket = settled.unwrap().expect("her order").2;
        let (mut run, io) = Returns::restock(bucket);
        drive::give_back(&mut SaleBackend(&self.sales[0]), bucket, &mut run, io)
            .await
            .unwrap();
    }

    /// Steps the buyer's walk up to the end it tells her bucket `home` (walk_end.lua).
    async fn to_walk_end(&self, walk: &mut InFlight, home: BucketId, buyer: u64) {
        let home = Keys::new(home).voucher();
        for _ in 0..100 {
            if let Io::Redis(Command::Script { script, keys, args }) = &walk.io {
                if script.name == "walk_end"
                    && keys[0] == home
                    && args
                        .get("user")
                        .is_some_and(|user| user.to_string() == buyer.to_string())
                {
                    return;
                }
            }
            walk.step(&self.sales[0]).await;
        }
        panic!("the walk never ended: {:?}", walk.io);
    }
}

/// A bucket given units back keeps the reopening another bucket's units gave it: sightings
/// made before those cannot mark it, once its own unit is sold again.
#[tokio::test]
async fn a_bucket_s_own_units_back_keep_its_reopening() {
    let sale = Buckets1::new(2).await;
    let in_a = sale.press(2).await.unwrap();
    let in_b = sale.press(1).await.unwrap();
    // Buyer 3 walks B then A: A keeps B's sighting.
    assert_eq!(sale.press(3).await, Err(ApiError::SoldOut));
    sale.cancel(1, in_b.order_id).await;
    sale.cancel(2, in_a.order_id).await;
    sale.press(6).await.unwrap();
    assert_eq!(sale.sales[1].stock().await, Some(1));
    // B's unit is a buyer of A's to buy.
    sale.press(8).await.unwrap();
}

/// A walk that saw every bucket empty, ended after units came back (quickly, with its
/// bucket's own unit back and sold again meanwhile, or slowly), marks nothing: her
/// bucket's next buyer buys the unit in the other.
#[tokio::test]
async fn a_walk_ended_after_units_came_back_marks_nothing() {
    for slow in [false, true] {
        let sale = Buckets1::new(2).await;
        let a = sale.sales[0].voucher;
        let in_a = sale.press(2).await.unwrap();
        let in_b = sale.press(1).await.unwrap();
        let mut walk = sale.start(4);
        sale.to_walk_end(&mut walk, a, 4).await;
        sale.cancel(1, in_b.order_id).await;
        if slow {
            tokio::time::sleep(Duration::from_millis(1_100)).await;
        } else {
            sale.cancel(2, in_a.order_id).await;
            sale.press(6).await.unwrap();
        }
        walk.run(&sale.sales[0], 1_000).await;
        assert_eq!(sale.sales[1].stock().await, Some(1), "slow: {slow}");
        assert!(!sale.sales[0].all_out().await, "slow: {slow}");
        sale.press(8).await.unwrap();
    }
}

/// Marks handed on from bucket to bucket end with the first: a lone walk that a mark ended
/// marks her bucket with that mark's sightings, so units that came back with no reopening
/// wait no longer than the first mark lasts.
#[tokio::test]
async fn a_mark_handed_on_ends_with_the_first() {
    let sale = Buckets1::new(3).await;
    for buyer in 3..6 {
        sale.press(buyer).await.unwrap();
    }
    // Buyer 6 (bucket A) finds them all empty: every bucket is marked.
    assert_eq!(sale.press(6).await, Err(ApiError::SoldOut));
    let (a, b, c) = (&sale.sales[0], &sale.sales[1], &sale.sales[2]);
    for bucket in [a, b, c] {
        assert!(bucket.all_out().await);
    }
    let first: String = c.conn.clone().get(c.keys().all_out()).await.unwrap();
    // B's mark lapses first; buyer 7 (bucket B) walks to C, whose mark ends her walk.
    let _: () = b.conn.clone().del(b.keys().all_out()).await.unwrap();
    assert_eq!(sale.press(7).await, Err(ApiError::SoldOut));
    let handed: String = b.conn.clone().get(b.keys().all_out()).await.unwrap();
    assert_eq!(handed, first, "B's mark rests on C's sightings");
    let (left_b, left_c): (i64, i64) = (
        b.conn.clone().pttl(b.keys().all_out()).await.unwrap(),
        c.conn.clone().pttl(c.keys().all_out()).await.unwrap(),
    );
    assert!(left_b <= left_c + 5, "B {left_b} ms, C {left_c} ms");
}
