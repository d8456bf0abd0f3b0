//! The units a queued purchase holds in Redis go back once, in whole, whoever rewrites its
//! buyer's `q:` record first (its publication, a lapsed drainer's publication, a
//! restock), and the sweep's audit finds a Redis whose stock differs from MySQL's; a
//! walked buyer's order is found whatever her bucket's record says. On the real Redis and
//! MariaDB, with the shipped scripts and procedures.

use redis::AsyncCommands;

use seckill_core::drive;
use seckill_core::returns::{self, Returns};
use seckill_core::sale::{
    Admission, Decision, Entry, Holding, Limits, Next, ReadFigures, ReadHolding, Record, Route,
};
use seckill_core::sql::Status;
use seckill_core::verdict::{Committed, Committing, Verdict};
use seckill_core::{BucketId, OrderId, UserId};
use seckill_tests::drivers::purchases;
use seckill_tests::drivers::scripts::{self, entry, Sale};

fn user(raw: u64) -> UserId {
    UserId::from_raw(raw)
}

/// The sale's keys as Redis holds them now (each with its expiry), to bring back later,
/// as a restart from a snapshot does. The order sequence is not among them.
struct Snapshot(Vec<(String, Option<Dump>)>);

/// A key's serialised value and TTL ([`scripts::dump_key`]).
type Dump = (Vec<u8>, i64);

impl Snapshot {
    async fn take(sale: &Sale) -> Snapshot {
        let keys = sale.keys();
        let mut conn = sale.conn.clone();
        let mut saved = Vec::new();
        for key in [keys.voucher(), keys.buyers(), keys.queue(), keys.metrics()] {
            let dump = scripts::dump_key(&mut conn, &key).await;
            saved.push((key, dump));
        }
        Snapshot(saved)
    }

    /// Redis restarts from the snapshot: every key of the sale as it was then.
    async fn restore(&self, sale: &Sale) {
        let mut conn = sale.conn.clone();
        for (key, dump) in &self.0 {
            let _: () = conn.del(key).await.unwrap();
            if let Some((dump, ttl)) = dump {
                scripts::restore_key(&mut conn, key, dump, *ttl).await;
            }
        }
    }
}

/// The buyer's admitted purchase committed and published by her own request: its order.
async fn drain_own(sale: &Sale, buyer: UserId, admission: &Admission) -> OrderId {
    let purchase = entry(buyer, admission);
    let committed = commit(sale, purchase).await;
    assert_eq!(committed.verdicts, [Verdict::Ordered]);
    let next = publish(sale, token(admission), purchase, &committed).await;
    assert_eq!(next, Next::Done);
    purchase.ticket.order_id().unwrap()
}

fn token(admission: &Admission) -> &str {
    &admission.lease.as_ref().expect("a lone buyer drains").token
}

/// The purchase committed alone, as its drainer commits it.
async fn commit(sale: &Sale, purchase: Entry) -> Committed {
    scripts::commit_batch(sale.voucher, &scripts::orders_of(&[purchase]))
        .await
        .unwrap()
}

/// The drainer holding `token` publishes its batch of the purchase alone, its own.
async fn publish(sale: &Sale, token: &str, purchase: Entry, committed: &Committed) -> Next {
    sale.publish_counted(
        token,
        Some(purchase),
        &scripts::published(&[purchase], &committed.verdicts),
        committed.ledger,
        Limits::SHIPPED,
    )
    .await
    .unwrap()
}

/// The units MySQL has left of the voucher, as a group commit reads them.
async fn mysql_stock(voucher: BucketId) -> i64 {
    let committed = scripts::commit_batch(voucher, &[] as &[Committing])
        .await
        .unwrap();
    committed.ledger.stock as i64
}

/// A sale of 5 units, 3 a buyer, whose buyer U bought 1 and whose Redis then restarted
/// from a snapshot taken before: U presses again for 3, and her purchase is admitted and
/// committed (MySQL's verdict: `duplicate` of that order), not yet published. The sale,
/// her order, her purchase, its admission and its commit.
async fn rolled_back_duplicate() -> (Sale, OrderId, Entry, Admission, Committed) {
    let sale = Sale::live_per_buyer(5, 3).await;
    let snapshot = Snapshot::take(&sale).await;
    let u = user(1);
    let bought = sale.admit_units(u, 1).await;
    let held = drain_own(&sale, u, &bought).await;
    assert_eq!(
        (sale.stock().await, mysql_stock(sale.voucher).await),
        (Some(4), 4)
    );
    snapshot.restore(&sale).await;
    assert_eq!(
        sale.stock().await,
        Some(5),
        "Redis knows nothing of her order"
    );
    let admission = sale.admit_units(u, 3).await;
    let purchase = entry(u, &admission);
    let committed = commit(&sale, purchase).await;
    assert_eq!(committed.verdicts, [Verdict::Duplicate(held, 1)]);
    assert_eq!(sale.stock().await, Some(2));
    (sale, held, purchase, admission, committed)
}

/// Redis's stock against MySQL's, once nothing is queued: they agree, and a buyer asking
/// for every unit MySQL has is sold them.
async fn assert_agrees(sale: &Sale, context: &str) {
    assert!(sale.queue().await.is_empty(), "{context}: nothing queued");
    let mysql = mysql_stock(sale.voucher).await;
    assert_eq!(
        sale.stock().await,
        Some(mysql),
        "{context}: Redis's stock is MySQL's"
    );
    let late = user(2);
    let admission = sale.admit_units(late, 3).await;
    assert!(
        matches!(admission.decision, Decision::Admitted(_)),
        "{context}: {admission:?}"
    );
    drain_own(sale, late, &admission).await;
}

/// A drainer commits a `duplicate` and stalls past its lease; the next drainer commits
/// the same batch again; both publish, in either order. The units her purchase held less
/// her order's (which MySQL took and Redis never charged) go back once: Redis's stock is
/// MySQL's, 4.
#[tokio::test]
async fn a_duplicate_s_units_go_back_once_whichever_publication_of_its_batch_comes_first() {
    for lapsed_first in [true, false] {
        let context = format!("the lapsed drainer's publication first: {lapsed_first}");
        let (sale, held, purchase, admission, first) = rolled_back_duplicate().await;
        sale.expire_lease().await;
        // The next press takes the free lease over her queued purchase (it asks for more
        // than is left, and takes nothing).
        let rescue = sale.admit_units(user(3), 3).await;
        assert_eq!(rescue.decision, Decision::Short { left: 2 });
        let rescuer = token(&rescue);
        let second = commit(&sale, purchase).await;
        assert_eq!(second.verdicts, first.verdicts);
        let lapsed = token(&admission);
        let batch = scripts::published(&[purchase], &second.verdicts);
        if lapsed_first {
            let lost = publish(&sale, lapsed, purchase, &first).await;
            assert_eq!(lost, Next::Lost, "{context}");
            assert_eq!(
                sale.record(user(1)).await,
                Some(Record::Ordered(held, 1)),
                "{context}: her order, which MySQL holds, is recorded"
            );
        }
        let done = sale.publish_counted(rescuer, None, &batch, second.ledger, Limits::SHIPPED);
        assert_eq!(done.await.unwrap(), Next::Done, "{context}");
        if !lapsed_first {
            assert_eq!(publish(&sale, lapsed, purchase, &first).await, Next::Lost);
        }
        assert_eq!(sale.stock().await, Some(4), "{context}");
        assert_eq!(sale.record(user(1)).await, Some(Record::Ordered(held, 1)));
        assert_eq!(sale.voucher_field("orders").await, Some(1), "{context}");
        assert_agrees(&sale, &context).await;
    }
}

/// MySQL gives the units of the buyer's order back (cancelled, or expired unpaid) while
/// her purchase that MySQL found a `duplicate` of it is still queued; the restock turns
/// her record into `c:`/`x:` before or after the publication. Her order's unit comes back
/// with the return, and her purchase's other 2 with whichever of the two comes first:
/// Redis's stock is MySQL's, 5.
#[tokio::test]
async fn a_return_of_the_order_a_queued_purchase_duplicates_loses_none_of_its_units() {
    for cancelled in [true, false] {
        for restock_first in [true, false] {
            let context = format!("cancelled: {cancelled}, restocked first: {restock_first}");
            let (sale, held, purchase, admission, committed) = rolled_back_duplicate().await;
            if !restock_first {
                let next = publish(&sale, token(&admission), purchase, &committed).await;
                assert_eq!(next, Next::Done);
            }
            give_back(&sale, held, cancelled).await;
            assert_eq!(restock(&sale).await, Ok(1), "{context}");
            let returned = if cancelled {
                Record::Cancelled(held)
            } else {
                Record::Expired(held)
            };
            assert_eq!(sale.record(user(1)).await, Some(returned), "{context}");
            if restock_first {
                let next = publish(&sale, token(&admission), purchase, &committed).await;
                assert_eq!(next, Next::Done);
                assert_eq!(sale.record(user(1)).await, Some(returned), "{context}");
            }
            assert_eq!(sale.stock().await, Some(5), "{context}");
            assert_agrees(&sale, &context).await;
        }
    }
}

/// MySQL gives the order's units back: cancelled by the admin, or expired unpaid.
async fn give_back(sale: &Sale, order_id: OrderId, cancelled: bool) {
    let mut db = scripts::connect().await.unwrap();
    if cancelled {
        let settled = scripts::settle_order(&mut db, order_id, None, Status::Cancelled)
            .await
            .unwrap();
        assert_eq!(settled.map(|(status, ..)| status), Some(Status::Cancelled));
    } else {
        scripts::pass_deadline(&mut db, order_id).await;
        let (expired, _) = scripts::expire_due(sale.voucher, 10).await.unwrap();
        assert_eq!(expired, 1);
    }
    db.disconnect().await.unwrap();
}

/// The voucher's returns applied to Redis, as a cancellation's request does.
async fn restock(sale: &Sale) -> Result<u64, seckill_core::BackendError> {
    finish(sale, Returns::restock(sale.voucher)).await
}

/// A sweep (its audit first), as a press handed the sweep lease runs it.
async fn sweep(sale: &Sale) -> Result<u64, seckill_core::BackendError> {
    finish(sale, Returns::sweep(sale.voucher)).await
}

async fn finish(
    sale: &Sale,
    (mut run, mut io): (Returns, returns::Io),
) -> Result<u64, seckill_core::BackendError> {
    loop {
        if let returns::Io::Done(given) = io {
            return given;
        }
        io = run.resume(purchases::give_back(sale, &io).await);
    }
}

/// A counter of the sale's, as `GET /metrics` reads it.
async fn counter(sale: &Sale, name: &str) -> i64 {
    let read = ReadFigures {
        voucher_id: sale.voucher,
    };
    let figures = sale.call(&read).await.unwrap();
    figures.expect("a live sale").counter(name)
}

/// Redis's stock set apart from MySQL's.
async fn set_stock(sale: &Sale, stock: i64) {
    let (mut conn, voucher) = (sale.conn.clone(), sale.keys().voucher());
    let _: () = conn.hset(voucher, "stock", stock).await.unwrap();
}

/// Redis and MySQL agree on the orders and differ on the units (a give-back skipped, a
/// rollback, a sync while purchases were queued): the sweep's audit finds it and sets
/// Redis's stock to MySQL's, counting the units, and marks nothing behind. While a
/// purchase is queued it leaves the stock alone: that purchase holds units MySQL has not
/// been asked for yet.
#[tokio::test]
async fn the_audit_finds_redis_s_units_apart_from_mysql_s_and_sets_them_to_mysql_s() {
    let sale = Sale::live_per_buyer(5, 3).await;
    let bought = sale.admit_units(user(1), 2).await;
    drain_own(&sale, user(1), &bought).await;
    assert_eq!(mysql_stock(sale.voucher).await, 3);
    set_stock(&sale, 1).await;
    assert_eq!(sweep(&sale).await, Ok(0));
    assert_eq!(sale.stock().await, Some(3), "Redis's lost units are back");
    assert_eq!(counter(&sale, "units:restored").await, 2);
    assert_eq!(sale.voucher_field("behind").await, None);
    set_stock(&sale, 5).await;
    assert_eq!(sweep(&sale).await, Ok(0));
    assert_eq!(
        sale.stock().await,
        Some(3),
        "units MySQL does not have are gone"
    );
    assert_eq!(counter(&sale, "units:withdrawn").await, 2);

    let queued = sale.admit_units(user(2), 1).await;
    assert!(matches!(queued.decision, Decision::Admitted(_)));
    set_stock(&sale, 1).await;
    assert_eq!(sweep(&sale).await, Ok(0));
    assert_eq!(sale.stock().await, Some(1), "a purchase is queued");
    assert_eq!(counter(&sale, "units:restored").await, 2);
}

/// A buyer whose bucket (the sale's first) was sold out walked to the other and bought
/// there, and her walk died before it pointed her bucket at her purchase: her bucket
/// holds only the count of her walks ("p:1"). Her order is found (MySQL knows), never
/// read as order 1.
#[tokio::test]
async fn a_walked_buyer_whose_walk_died_halfway_finds_her_order() {
    let buckets = Sale::live_buckets(2, 2).await;
    let [home, other] = &buckets[..] else {
        panic!("two buckets")
    };
    // Even buyers' bucket is the first: buyer 4 takes its unit.
    let first = home.admit_routed_units(user(4), Route::Home, 1).await;
    drain_own(home, user(4), &first).await;
    let walker = user(2);
    let out = home.admit_routed_units(walker, Route::Home, 1).await;
    assert_eq!(out.decision, Decision::BucketOut);
    assert_eq!(home.raw_record(walker).await.as_deref(), Some("p:1"));
    let admitted = other.admit_routed_units(walker, Route::Walk, 1).await;
    let order = drain_own(other, walker, &admitted).await;

    let holding = home
        .call(&ReadHolding {
            voucher_id: home.voucher,
            user: walker,
        })
        .await
        .unwrap();
    assert_eq!(holding, Holding::Missing, "MySQL knows where her order is");
    let mut db = scripts::connect().await.unwrap();
    let found = scripts::order_of(&mut db, walker, home.sale()).await;
    db.disconnect().await.unwrap();
    assert_eq!(found, Ok(Some(order)));
}

/// A lapsed drainer's publication records an order only over the purchase it committed:
/// after the heal named that order lost (MySQL lost it and gave its unit to another), the
/// buyer is not told `already_ordered` of an order MySQL does not hold.
#[tokio::test]
async fn a_lapsed_drainer_does_not_revive_an_order_the_heal_named_lost() {
    let sale = Sale::live(1).await;
    let a = user(1);
    let admission = sale.admit(a).await;
    let purchase = entry(a, &admission);
    let committed = commit(&sale, purchase).await;
    let order = purchase.ticket.order_id().unwrap();
    // Her drainer stalls; the next press takes the lease over and publishes her order.
    sale.expire_lease().await;
    let mut next = purchases::InFlight::start(sale.sale(), user(2), Limits::SHIPPED);
    next.run(&sale, 60).await;
    assert_eq!(sale.record(a).await, Some(Record::Ordered(order, 1)));
    // MySQL loses it, and a stranger's order takes the unit; a sweep heals: lost for good.
    scripts::lose_commits(sale.voucher, &[order]).await;
    let stranger = OrderId::compose(
        seckill_core::order_id::EPOCH + (1 << 30),
        sale.voucher.raw() as i64 * 2,
    )
    .unwrap();
    scripts::commit_batch(sale.voucher, &[(stranger, user(99))])
        .await
        .unwrap();
    let mut conn = sale.conn.clone();
    let _: () = conn
        .hset(sale.keys().buyers(), 99, format!("o:{stranger}"))
        .await
        .unwrap();
    let _: () = conn
        .hincr(sale.keys().voucher(), "orders", 1)
        .await
        .unwrap();
    let (mut run, io) = Returns::sweep(sale.voucher);
    drive::give_back(
        &mut purchases::SaleBackend(&sale),
        sale.voucher,
        &mut run,
        io,
    )
    .await
    .unwrap();
    assert_eq!(sale.record(a).await, Some(Record::Lost(order)));
    // The stalled drainer publishes at last.
    let next = publish(&sale, token(&admission), purchase, &committed).await;
    assert_eq!(next, Next::Lost);
    assert_eq!(sale.record(a).await, Some(Record::Lost(order)));
}
