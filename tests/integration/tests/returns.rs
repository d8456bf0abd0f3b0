//! Units coming back to a live sale (`lua/restock.lua`) and the sweep of expired orders
//! riding on admission (`lua/admission.lua`), on the real Redis: each unit back exactly
//! once whatever is replayed, and one request at a time sweeping.

use redis::AsyncCommands;

use seckill_core::sale::{Decision, ReadMark, Record, Restock};
use seckill_core::sql::Returned;
use seckill_core::{OrderId, UserId};
use seckill_tests::scripts::{self, entry, Sale};

fn user(raw: u64) -> UserId {
    UserId::from_raw(raw)
}

/// A sale of `stock` units, every one of them ordered (as the drainer records them).
async fn sold_out_sale(stock: u64) -> (Sale, Vec<(UserId, OrderId)>) {
    let sale = Sale::live(stock).await;
    let mut orders = Vec::new();
    for buyer in 1..=stock {
        let admission = sale.admit(user(buyer)).await;
        let purchase = entry(user(buyer), &admission);
        let batch = [purchase];
        let verdicts = scripts::commit_batch(sale.voucher, &scripts::orders_of(&batch))
            .await
            .unwrap()
            .verdicts;
        let token = admission.lease.expect("a lone buyer drains").token;
        sale.publish(
            &token,
            Some(purchase),
            &scripts::published(&batch, &verdicts),
        )
        .await
        .unwrap();
        orders.push((user(buyer), purchase.ticket.order_id().unwrap()));
    }
    assert_eq!(sale.stock().await, Some(0));
    (sale, orders)
}

fn returned(event: u64, (user, order_id): (UserId, OrderId), cancelled: bool) -> Returned {
    Returned {
        event,
        order_id,
        user,
        cancelled,
    }
}

/// When the sale's next sweep of expired orders is due.
async fn sweep_at(sale: &Sale) -> Option<i64> {
    sale.conn
        .clone()
        .hget(sale.keys().voucher(), "sweep_at")
        .await
        .unwrap()
}

async fn restock(sale: &Sale, returns: &[Returned], swept: Option<Option<i64>>) -> Option<u64> {
    sale.call(&Restock {
        voucher_id: sale.voucher,
        returns,
        swept,
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn each_unit_comes_back_once_however_often_its_events_are_applied() {
    let (sale, orders) = sold_out_sale(3).await;
    let first = [
        returned(10, orders[0], true),
        returned(11, orders[1], false),
    ];
    assert_eq!(restock(&sale, &first, None).await, Some(2));
    // A lost reply, a second request with the same page, a page that overlaps the next.
    assert_eq!(restock(&sale, &first, None).await, Some(0));
    let overlapping = [first[1], returned(12, orders[2], true)];
    assert_eq!(restock(&sale, &overlapping, None).await, Some(1));
    assert_eq!(restock(&sale, &overlapping, None).await, Some(0));

    assert_eq!(sale.stock().await, Some(3));
    assert_eq!(
        sale.call(&ReadMark {
            voucher_id: sale.voucher
        })
        .await
        .unwrap(),
        12
    );
    assert_eq!(
        sale.record(orders[0].0).await,
        Some(Record::Cancelled(orders[0].1))
    );
    assert_eq!(
        sale.record(orders[1].0).await,
        Some(Record::Expired(orders[1].1))
    );
    // Its buyer holds no order and may not buy again; anyone else may.
    assert_eq!(
        sale.admit(orders[0].0).await.decision,
        Decision::Cancelled(orders[0].1)
    );
    assert_eq!(
        sale.admit(orders[1].0).await.decision,
        Decision::Expired(orders[1].1)
    );
    assert!(matches!(
        sale.admit(user(99)).await.decision,
        Decision::Admitted(_)
    ));
}

#[tokio::test]
async fn a_restock_of_a_sale_redis_lost_changes_nothing() {
    let (sale, orders) = sold_out_sale(1).await;
    sale.lose(&[sale.keys().voucher()]).await;
    assert_eq!(
        restock(&sale, &[returned(5, orders[0], true)], None).await,
        None
    );
    let exists: bool = sale
        .conn
        .clone()
        .exists(sale.keys().voucher())
        .await
        .unwrap();
    assert!(!exists, "no sale state made up");
}

#[tokio::test]
async fn one_press_at_a_time_sweeps_once_a_deadline_has_passed() {
    let (sale, _) = sold_out_sale(1).await;
    assert!(!sale.admit(user(50)).await.sweep, "no deadline has passed");
    let now = sale.now_ms().await;
    let _: () = sale
        .conn
        .clone()
        .hset(sale.keys().voucher(), "sweep_at", now - 1)
        .await
        .unwrap();
    let sweeping = sale.admit(user(51)).await;
    assert!(sweeping.sweep);
    assert_eq!(sweeping.decision, Decision::SoldOut);
    // The flood meanwhile is decided as ever, and nobody else sweeps.
    let other = sale.admit(user(52)).await;
    assert!(!other.sweep);
    assert_eq!(other.decision, Decision::SoldOut);

    // The sweep ends: the next deadline is set, and its lease is free.
    let next = now + 60_000;
    assert_eq!(restock(&sale, &[], Some(Some(next))).await, Some(0));
    assert_eq!(sweep_at(&sale).await, Some(next));
    assert!(!sale.admit(user(53)).await.sweep);
    let lease: Option<String> = sale.conn.clone().get(sale.keys().sweep()).await.unwrap();
    assert_eq!(lease, None);

    // No order left unpaid: no sweep is due any more.
    assert_eq!(restock(&sale, &[], Some(None)).await, Some(0));
    assert_eq!(sweep_at(&sale).await, None);
}

#[tokio::test]
async fn a_published_order_makes_its_deadline_the_next_sweep() {
    let (sale, orders) = sold_out_sale(2).await;
    // The first order's admission second plus the voucher's default 900 s.
    let seconds = (orders[0].1.raw() >> 32) as i64 + seckill_core::order_id::EPOCH;
    assert_eq!(sweep_at(&sale).await, Some((seconds + 900) * 1000));
}
