//! Units coming back to a live sale (`lua/restock.lua`) and the sweep of expired orders
//! riding on admission (`lua/admission.lua`), on the real Redis: each unit back exactly
//! once whatever is replayed, and one request at a time sweeping.

use redis::AsyncCommands;

use seckill_core::sale::{Admission, Decision, Limits, Mark, ReadMark, Record, Restock, Swept};
use seckill_core::sql::{Returned, Status};
use seckill_core::verdict::{Committed, Verdict};
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
        orders.push(buy(&sale, user(buyer)).await);
    }
    assert_eq!(sale.stock().await, Some(0));
    (sale, orders)
}

/// The buyer's purchase admitted, committed and published by her own request.
async fn buy(sale: &Sale, buyer: UserId) -> (UserId, OrderId) {
    let admission = sale.admit(buyer).await;
    let purchase = entry(buyer, &admission);
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
    (buyer, purchase.ticket.order_id().unwrap())
}

async fn mark(sale: &Sale) -> Mark {
    sale.call(&ReadMark {
        voucher_id: sale.voucher,
    })
    .await
    .unwrap()
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

/// Applies `returns`, read after the sale's mark as it stands now.
async fn restock(sale: &Sale, returns: &[Returned], swept: Option<Swept>) -> Option<u64> {
    let after = mark(sale).await.returned;
    restock_read_after(sale, after, returns, swept).await
}

/// Applies `returns`, read after the mark `after`.
async fn restock_read_after(
    sale: &Sale,
    after: u64,
    returns: &[Returned],
    swept: Option<Swept>,
) -> Option<u64> {
    sale.call(&Restock {
        voucher_id: sale.voucher,
        returns,
        after,
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
    assert_eq!(mark(&sale).await.returned, 12);
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
    let deadlines = mark(&sale).await.deadlines;
    let ends = |next_ms| Some(Swept { next_ms, deadlines });
    assert_eq!(restock(&sale, &[], ends(Some(next))).await, Some(0));
    assert_eq!(sweep_at(&sale).await, Some(next));
    assert!(!sale.admit(user(53)).await.sweep);
    let lease: Option<String> = sale.conn.clone().get(sale.keys().sweep()).await.unwrap();
    assert_eq!(lease, None);

    // No order left unpaid: no sweep is due any more.
    assert_eq!(restock(&sale, &[], ends(None)).await, Some(0));
    assert_eq!(sweep_at(&sale).await, None);
}

#[tokio::test]
async fn a_sweep_keeps_the_deadline_of_an_order_published_after_it_read_mysql() {
    let sale = Sale::live(2).await;
    buy(&sale, user(1)).await;
    // A sweep begins (where the sale stands, then MySQL, which knows one order); the
    // second is committed and published meanwhile.
    let began = mark(&sale).await;
    buy(&sale, user(2)).await;
    let published = sweep_at(&sale).await;
    assert!(published.is_some());
    let swept = Swept {
        next_ms: None,
        deadlines: began.deadlines,
    };
    assert_eq!(restock(&sale, &[], Some(swept)).await, Some(0));
    assert_eq!(
        sweep_at(&sale).await,
        published,
        "the second order's deadline stays"
    );
    // A sweep that began after it sets what MySQL says.
    let next = published.unwrap() + 5_000;
    let swept = Swept {
        next_ms: Some(next),
        deadlines: mark(&sale).await.deadlines,
    };
    assert_eq!(restock(&sale, &[], Some(swept)).await, Some(0));
    assert_eq!(sweep_at(&sale).await, Some(next));
}

#[tokio::test]
async fn a_published_order_makes_its_deadline_the_next_sweep() {
    let (sale, orders) = sold_out_sale(2).await;
    // The first order's admission second plus the voucher's default 900 s.
    let seconds = (orders[0].1.raw() >> 32) as i64 + seckill_core::order_id::EPOCH;
    assert_eq!(sweep_at(&sale).await, Some((seconds + 900) * 1000));
}

#[tokio::test]
async fn an_order_cancelled_before_its_publication_stays_cancelled_and_the_sale_sound() {
    let sale = Sale::live(2).await;
    let (admission, committed) = commit_alone(&sale, user(1)).await;
    let order_id = entry(user(1), &admission).ticket.order_id().unwrap();
    // Cancelled (by an admin, say) and restocked before the drainer publishes.
    cancel_and_restock(&sale, order_id, 0).await;
    assert_eq!(
        sale.record(user(1)).await,
        Some(Record::Cancelled(order_id))
    );
    publish_alone(&sale, user(1), &admission, &committed).await;
    assert_eq!(
        sale.record(user(1)).await,
        Some(Record::Cancelled(order_id))
    );
    let stale: bool = sale
        .conn
        .clone()
        .hexists(sale.keys().voucher(), "stale")
        .await
        .unwrap();
    assert!(!stale, "a cancellation is no sign of Redis behind MySQL");
    // Its unit is back once: the second unit and hers.
    assert_eq!(sale.stock().await, Some(2));
}

/// The buyer's purchase admitted and committed alone, not yet published.
async fn commit_alone(sale: &Sale, buyer: UserId) -> (Admission, Committed) {
    let admission = sale.admit(buyer).await;
    let batch = [entry(buyer, &admission)];
    let committed = scripts::commit_batch(sale.voucher, &scripts::orders_of(&batch))
        .await
        .unwrap();
    (admission, committed)
}

/// Publishes a purchase [`commit_alone`] committed, as its own request does.
async fn publish_alone(sale: &Sale, buyer: UserId, admission: &Admission, committed: &Committed) {
    let purchase = entry(buyer, admission);
    let token = admission
        .lease
        .as_ref()
        .expect("a lone buyer drains")
        .token
        .clone();
    sale.publish_counted(
        &token,
        Some(purchase),
        &scripts::published(&[purchase], &committed.verdicts),
        committed.ledger,
        Limits::SHIPPED,
    )
    .await
    .unwrap();
}

/// The orders Redis has learnt of, by the voucher hash.
async fn orders_known(sale: &Sale) -> i64 {
    sale.conn
        .clone()
        .hget(sale.keys().voucher(), "orders")
        .await
        .unwrap()
}

/// Cancels the order in MySQL, by the admin.
async fn cancel(order_id: OrderId) {
    let mut db = scripts::connect().await.unwrap();
    let settled = scripts::settle_order(&mut db, order_id, None, Status::Cancelled)
        .await
        .unwrap();
    assert_eq!(
        settled.map(|(status, changed, _)| (status, changed)),
        Some((Status::Cancelled, true))
    );
}

/// Cancels the order in MySQL and applies the voucher's returns after `after` to Redis,
/// as a cancellation's request does.
async fn cancel_and_restock(sale: &Sale, order_id: OrderId, after: u64) {
    cancel(order_id).await;
    let returns = scripts::returns_after(sale.voucher, after, 10)
        .await
        .unwrap();
    assert_eq!(restock(sale, &returns, None).await, Some(1));
}

/// A sold-out sale whose Redis is one unit ahead of MySQL (as after a sync while
/// purchases were queued), and a late buyer's purchase committed alone: MySQL finds no
/// unit for her, and her publication is still to come.
async fn sold_out_in_mysql_first(
    stock: u64,
) -> (Sale, Vec<(UserId, OrderId)>, UserId, Admission, Committed) {
    let (sale, orders) = sold_out_sale(stock).await;
    let _: () = sale
        .conn
        .clone()
        .hset(sale.keys().voucher(), "stock", 1)
        .await
        .unwrap();
    let late = user(stock + 1);
    let (admission, committed) = commit_alone(&sale, late).await;
    assert_eq!(committed.verdicts, [Verdict::SoldOut]);
    (sale, orders, late, admission, committed)
}

#[tokio::test]
async fn a_restock_in_flight_across_a_sold_out_publication_loses_no_return() {
    let (sale, orders, late, admission, committed) = sold_out_in_mysql_first(2).await;
    // One cancellation is restocked; a second one's restock reads its page, and stalls.
    cancel_and_restock(&sale, orders[0].1, 0).await;
    cancel(orders[1].1).await;
    let read_after = mark(&sale).await.returned;
    let in_flight = scripts::returns_after(sale.voucher, read_after, 10)
        .await
        .unwrap();
    assert_eq!(in_flight.len(), 1);
    // The sold-out publication moves the mark back before the first cancellation ...
    publish_alone(&sale, late, &admission, &committed).await;
    assert!(mark(&sale).await.returned < read_after);
    // ... so the stalled page, which lacks that return, applies nothing ...
    assert_eq!(
        restock_read_after(&sale, read_after, &in_flight, None).await,
        Some(0)
    );
    // ... and the next sweep gives both units back.
    let after = mark(&sale).await.returned;
    let returns = scripts::returns_after(sale.voucher, after, 10)
        .await
        .unwrap();
    assert_eq!(returns.len(), 2);
    assert_eq!(restock(&sale, &returns, None).await, Some(2));
    let mysql = scripts::lookup(sale.voucher).await.unwrap();
    assert_eq!(mysql.terms.map(|terms| terms.stock), Some(2));
    assert_eq!(sale.stock().await, Some(2));
    assert_eq!(orders_known(&sale).await, mysql.ledger.orders as i64);
}

#[tokio::test]
async fn a_sold_out_publication_never_wipes_a_unit_given_back_after_its_commit() {
    for stock in [1, 3] {
        let (sale, orders, late, admission, committed) = sold_out_in_mysql_first(stock).await;
        // Between the commit and its publication, a buyer cancels: MySQL and Redis both
        // get her unit back.
        cancel_and_restock(&sale, orders[0].1, 0).await;
        assert_eq!(sale.stock().await, Some(1));
        publish_alone(&sale, late, &admission, &committed).await;
        // The verdict's 0 stands for the moment, and the next sweep is due at once ...
        assert_eq!(sale.stock().await, Some(0));
        assert_eq!(sweep_at(&sale).await, Some(0));
        let due = sale.admit(user(90)).await;
        assert!(due.sweep, "the next press sweeps");
        // ... and gives the cancelled unit back again, its order counted once.
        let after = mark(&sale).await.returned;
        let returns = scripts::returns_after(sale.voucher, after, 10)
            .await
            .unwrap();
        assert_eq!(returns.len(), 1, "the return after the batch's commit");
        assert_eq!(restock(&sale, &returns, None).await, Some(1));
        let mysql = scripts::lookup(sale.voucher).await.unwrap();
        assert_eq!(mysql.terms.map(|terms| terms.stock), Some(1));
        assert_eq!(
            sale.stock().await,
            Some(1),
            "Redis holds the unit MySQL holds"
        );
        assert_eq!(orders_known(&sale).await, mysql.ledger.orders as i64);
        assert_eq!(
            sale.record(orders[0].0).await,
            Some(Record::Cancelled(orders[0].1))
        );
    }
}

#[tokio::test]
async fn a_return_a_sync_already_named_never_counts_its_order_twice() {
    let (sale, orders) = sold_out_sale(2).await;
    let (buyer, order_id) = orders[0];
    // A sync staged her as cancelled, with a mark from before her cancellation's event
    // (its read of the buyers came after the cancellation, its read of the mark before).
    let _: () = sale
        .conn
        .clone()
        .hset(
            sale.keys().buyers(),
            buyer.to_string(),
            format!("c:{order_id}"),
        )
        .await
        .unwrap();
    let before = orders_known(&sale).await;
    cancel_and_restock(&sale, order_id, 0).await;
    assert_eq!(orders_known(&sale).await, before, "her order was known");
    assert_eq!(sale.stock().await, Some(1));
    assert_eq!(sale.record(buyer).await, Some(Record::Cancelled(order_id)));
}
