//! Units coming back to a live sale (`lua/restock.lua`) and the sweep of expired orders
//! riding on admission (`lua/admission.lua`), on the real Redis: each unit back exactly
//! once whatever is replayed, and one request at a time sweeping.

use redis::AsyncCommands;

use seckill_core::ledger::{ReturnKind, Returned};
use seckill_core::returns::{self, Returns};
use seckill_core::sale::{
    Admission, Decision, Limits, Mark, ReadMark, Record, Restock, Swept, MYSQL_BEHIND,
};
use seckill_core::sql::Status;
use seckill_core::verdict::{Committed, Verdict};
use seckill_core::{BackendError, OrderId, UserId};
use seckill_tests::drivers::scripts::{self, entry, Sale};
use seckill_tests::drivers::{invariants, purchases};

use crate::backends::shared::assert_admitted;

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
    (buyer, drain_own(sale, buyer, &admission).await)
}

/// The buyer's admitted purchase committed and published by her own request: its order.
async fn drain_own(sale: &Sale, buyer: UserId, admission: &Admission) -> OrderId {
    let purchase = entry(buyer, admission);
    let batch = [purchase];
    let committed = scripts::commit_batch(sale.voucher, &scripts::orders_of(&batch))
        .await
        .unwrap();
    let token = &admission.lease.as_ref().expect("a lone buyer drains").token;
    sale.publish_counted(
        token,
        Some(purchase),
        &scripts::published(&batch, &committed.verdicts),
        committed.ledger,
        Limits::SHIPPED,
    )
    .await
    .unwrap();
    purchase.ticket.order_id().unwrap()
}

async fn mark(sale: &Sale) -> Mark {
    sale.call(&ReadMark {
        voucher_id: sale.voucher,
    })
    .await
    .unwrap()
}

fn returned(event: u64, (user, order_id): (UserId, OrderId), cancelled: bool) -> Returned {
    let kind = if cancelled {
        ReturnKind::Cancelled { order_id, user }
    } else {
        ReturnKind::Expired { order_id, user }
    };
    Returned {
        event,
        kind,
        units: 1,
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
    .map(|restocked| restocked.given)
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
    assert_admitted(&sale.admit(user(99)).await);
}

#[tokio::test]
async fn a_restock_of_a_sale_redis_lost_changes_nothing() {
    let (sale, orders) = sold_out_sale(1).await;
    sale.lose(&[sale.keys().voucher()]).await;
    assert_eq!(
        restock(&sale, &[returned(5, orders[0], true)], None).await,
        None
    );
    let mut redis = sale.conn.clone();
    let exists: bool = redis.exists(sale.keys().voucher()).await.unwrap();
    assert!(!exists, "no sale state made up");
}

#[tokio::test]
async fn one_press_at_a_time_sweeps_once_a_deadline_has_passed() {
    let (sale, _) = sold_out_sale(1).await;
    assert!(!sale.admit(user(50)).await.sweep, "no deadline has passed");
    let now = sale.now_ms().await;
    sale.make_sweep_due().await;
    let sweeping = sale.admit(user(51)).await;
    assert!(sweeping.sweep);
    assert_eq!(sweeping.decision, Decision::SoldOut);
    // The flood meanwhile is decided as ever, and nobody else sweeps.
    let other = sale.admit(user(52)).await;
    assert!(!other.sweep);
    assert!(other.sweeping, "it hears another request sweeping");
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
    let stale = sale.stale().await;
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
    sale.voucher_set("stock", 1).await;
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

/// Runs a sweep to its end, as a sweeping request does; with `commits_fail`, every commit
/// of orders (not the ledger's read) fails as a MySQL gone away would. Returns its end and
/// its report.
async fn run_sweep(sale: &Sale, commits_fail: bool) -> (Result<u64, BackendError>, Option<String>) {
    let (mut run, mut io) = Returns::sweep(sale.voucher);
    loop {
        let input = match &io {
            returns::Io::Done(given) => return (given.clone(), run.report()),
            returns::Io::Commit(batch) if commits_fail && !batch.is_empty() => {
                returns::Input::Committed(Err(BackendError::Mysql("gone".into())))
            }
            io => purchases::give_back(sale, io).await,
        };
        io = run.resume(input);
    }
}

/// The orders MySQL lacks by Redis's count, as the voucher's mark says, and whether
/// `GET /health`'s set names the voucher.
async fn behind(sale: &Sale) -> (Option<u64>, bool) {
    let mut conn = sale.conn.clone();
    let missing: Option<u64> = conn.hget(sale.keys().voucher(), "behind").await.unwrap();
    let listed: bool = conn
        .sismember(MYSQL_BEHIND, sale.voucher.to_string())
        .await
        .unwrap();
    (missing, listed)
}

/// The buyer's order of the sale in MySQL.
async fn order_of(sale: &Sale, buyer: UserId) -> Option<OrderId> {
    let mut db = scripts::connect().await.unwrap();
    let order = scripts::order_of(&mut db, buyer, sale.sale())
        .await
        .unwrap();
    db.disconnect().await.unwrap();
    order
}

async fn counter(sale: &Sale, name: &str) -> Option<i64> {
    sale.conn
        .clone()
        .hget(sale.keys().metrics(), name)
        .await
        .unwrap()
}

/// The voucher's `order.created` events in MySQL, by order id.
async fn created_events(sale: &Sale) -> Vec<u64> {
    let mut db = scripts::connect().await.unwrap();
    let events: Vec<u64> = mysql_async::prelude::Queryable::exec(
        &mut db,
        "SELECT order_id FROM tb_order_event WHERE voucher_id = ? AND type = 1 ORDER BY order_id",
        (sale.voucher.raw(),),
    )
    .await
    .unwrap();
    db.disconnect().await.unwrap();
    events
}

#[tokio::test]
async fn a_sweep_commits_again_the_orders_mysql_lost_and_says_so_until_it_has() {
    for (stock, lost) in [(3, 1), (5, 3)] {
        let (sale, orders) = sold_out_sale(stock).await;
        let lost_orders: Vec<OrderId> = orders[stock as usize - lost..]
            .iter()
            .map(|(_, order_id)| *order_id)
            .collect();
        scripts::lose_commits(sale.voucher, &lost_orders).await;
        assert_eq!(
            invariants::read(sale.voucher.raw()).await.mysql_stock,
            lost as u64
        );

        // A sweep whose commits fail finds the loss and marks it, and heals nothing.
        let (ended, report) = run_sweep(&sale, true).await;
        assert_eq!(ended, Err(BackendError::Mysql("gone".into())));
        let report = report.expect("the heal is reported");
        assert!(
            report.contains(&format!("lacked {lost} orders of voucher {}", sale.voucher))
                && report.contains(" 0 committed again"),
            "{report}"
        );
        assert_eq!(behind(&sale).await, (Some(lost as u64), true));

        // The next one commits them again: same ids, same buyers, the stock moved once,
        // one order.created each; the mark is cleared.
        let (ended, report) = run_sweep(&sale, false).await;
        assert_eq!(ended, Ok(0));
        let report = report.expect("the heal is reported");
        assert!(
            report.contains(&format!("lacked {lost} orders"))
                && report.contains(&format!("{lost} committed again")),
            "{report}"
        );
        assert_eq!(behind(&sale).await, (None, false));
        for (buyer, order_id) in &orders {
            assert_eq!(
                order_of(&sale, *buyer).await,
                Some(*order_id),
                "buyer {buyer}"
            );
            assert_eq!(
                sale.record(*buyer).await,
                Some(Record::Ordered(*order_id, 1))
            );
        }
        assert_eq!(invariants::read(sale.voucher.raw()).await.mysql_stock, 0);
        let mut ids: Vec<u64> = orders.iter().map(|(_, id)| id.raw()).collect();
        ids.sort();
        assert_eq!(created_events(&sale).await, ids);
        assert_eq!(counter(&sale, "orders:restored").await, Some(lost as i64));
        assert_eq!(orders_known(&sale).await, stock as i64);

        // Healed, a sweep finds nothing to do.
        assert_eq!(run_sweep(&sale, false).await, (Ok(0), None));
        assert_eq!(created_events(&sale).await.len(), stock as usize);
    }
}

#[tokio::test]
async fn an_order_mysql_lost_yields_to_the_buyer_s_other_order_and_one_it_has_no_unit_for_is_named()
{
    let (sale, orders) = sold_out_sale(4).await;
    let lost: Vec<OrderId> = orders[1..].iter().map(|(_, order_id)| *order_id).collect();
    scripts::lose_commits(sale.voucher, &lost).await;
    // After the failover MySQL took other orders (as a sync that loaded its stock would
    // let buyers make): one of buyer 2's own, and a stranger's, so that one unit is left
    // for the two other orders it lost.
    let (two, three) = (orders[1].0, orders[2].0);
    // Ids from a second far ahead, where admission hands out none (and after the voucher's
    // creation, as the group commit takes them); the voucher's id keeps them apart from
    // other tests'.
    let made_up = |n: i64| {
        OrderId::compose(
            seckill_core::order_id::EPOCH + (1 << 30),
            sale.voucher.raw() as i64 * 2 + n,
        )
        .unwrap()
    };
    let (others, stranger) = (made_up(0), user(99));
    let taken = scripts::commit_batch(sale.voucher, &[(others, two), (made_up(1), stranger)])
        .await
        .unwrap();
    assert_eq!(taken.created, 2);

    let (ended, report) = run_sweep(&sale, false).await;
    assert_eq!(ended, Ok(0));
    let report = report.expect("the heal is reported");
    // Buyer 2's other order wins; of buyers 3 and 4, whose orders compete for the one unit
    // left, the earlier order (buyer 3's) comes back, and buyer 4's is lost for good.
    assert_eq!(order_of(&sale, two).await, Some(others));
    assert_eq!(sale.record(two).await, Some(Record::Ordered(others, 1)));
    assert_eq!(order_of(&sale, three).await, Some(orders[2].1));
    let four = orders[3].0;
    assert_eq!(order_of(&sale, four).await, None);
    assert_eq!(sale.record(four).await, Some(Record::Lost(orders[3].1)));
    assert!(
        report.contains("1 lost for good") && report.contains(&orders[3].1.to_string()),
        "{report}"
    );
    assert_eq!(counter(&sale, "orders:restored").await, Some(1));
    assert_eq!(counter(&sale, "orders:unrecoverable").await, Some(1));
    assert_eq!(invariants::read(sale.voucher.raw()).await.mysql_stock, 0);
    // The lost order leaves Redis's count (4 learnt of, 1 lost), and MySQL lacks none of
    // the others: the voucher is no longer behind.
    assert_eq!(orders_known(&sale).await, 3);
    assert_eq!(behind(&sale).await, (None, false));
    // His order lost, buyer 4 may buy again: the sale has no unit, so he hears sold_out.
    assert_eq!(sale.admit(four).await.decision, Decision::SoldOut);
}

/// The buyer's purchase at this bucket of a sale (a press that knows the buckets),
/// committed and published by her own request.
async fn buy_at(sale: &Sale, buyer: UserId) -> OrderId {
    let admission = sale.admit_routed(buyer).await;
    drain_own(sale, buyer, &admission).await
}

#[tokio::test]
async fn an_order_mysql_lost_yields_to_the_order_its_buyer_then_made_in_another_bucket() {
    // Buyer 3 walked to bucket A and heard 201 for her order there; MySQL failed over to
    // a replica without it; at bucket B, which had no record of her, she pressed again
    // and heard 201 for another.
    let buckets = Sale::live_buckets(2, 2).await;
    let (a, b) = (&buckets[0], &buckets[1]);
    let three = user(3);
    let in_a = buy_at(a, three).await;
    scripts::lose_commits(a.voucher, &[in_a]).await;
    let in_b = buy_at(b, three).await;
    assert_eq!((a.stock().await, b.stock().await), (Some(0), Some(0)));
    assert!(a.mark_all_out().await);

    let (ended, report) = run_sweep(a, false).await;
    assert_eq!(ended, Ok(0));
    let report = report.expect("the heal is reported");
    assert!(report.contains("lacked 1 orders"), "{report}");
    // Her order in B wins, as a publication would have it: A's record names it (so A
    // answers already_ordered for it), A counts no order for her, and the unit MySQL
    // still holds for A is back in A's Redis, its all-out mark gone. A is whole again.
    assert_eq!(a.raw_record(three).await, Some(format!("e:{in_b}")));
    assert_eq!(orders_known(a).await, 0);
    assert_eq!(invariants::read(a.voucher.raw()).await.mysql_stock, 1);
    assert_eq!(a.stock().await, Some(1));
    assert!(!a.all_out().await, "the all-out mark stands");
    assert_eq!(behind(a).await, (None, false));
    assert_eq!(
        a.admit_routed(three).await.decision,
        Decision::AlreadyOrdered(in_b)
    );
    // Nothing is left to heal; A's unit sells to a late buyer.
    assert_eq!(run_sweep(a, false).await, (Ok(0), None));
    assert_admitted(&a.admit_routed(user(5)).await);
}

#[tokio::test]
async fn an_admin_s_sync_clears_the_mark_of_mysql_behind() {
    let (sale, orders) = sold_out_sale(2).await;
    scripts::lose_commits(sale.voucher, &[orders[1].1]).await;
    // A sweep whose commits fail marks the loss.
    let (ended, _) = run_sweep(&sale, true).await;
    assert_eq!(ended, Err(BackendError::Mysql("gone".into())));
    assert_eq!(behind(&sale).await, (Some(1), true));
    // The admin's sync loads the sale from MySQL: the mark goes, and the next sweep
    // (due at once) audits afresh, and heals.
    sync(&sale).await;
    assert_eq!(behind(&sale).await, (None, false));
    let (ended, report) = run_sweep(&sale, false).await;
    assert_eq!(ended, Ok(0));
    assert!(report.expect("healed").contains("1 committed again"));
    assert_eq!(behind(&sale).await, (None, false));
}

/// The admin's sync of the sale, run to its end as the component runs it.
async fn sync(sale: &Sale) {
    let (mut run, io) = seckill_core::sync::VoucherSync::start(sale.voucher, "sync-token".into());
    let synced = seckill_core::drive::sync(
        &mut purchases::SaleBackend(sale),
        sale.voucher,
        &mut run,
        io,
    )
    .await;
    assert!(synced.is_ok(), "{synced:?}");
}
