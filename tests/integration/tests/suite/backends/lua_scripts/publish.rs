//! `lua/publish.lua`: what a publication records of MySQL's verdicts and orders.

use std::collections::BTreeMap;

use redis::AsyncCommands;
use seckill_core::sale::{Decision, Entry, Installer, Next, Record, Shown, STALE};
use seckill_core::verdict::Verdict;
use seckill_tests::drivers::scripts::Sale;

use super::{
    admit_all, behind_a_sweep, buyer, entry, first_after_sync, hold_lease, id_of, lead, order,
    ordered, orders_recorded, pttl, publish_own, publish_own_counted, read_view, records, ticket,
    told, verdict,
};
use crate::backends::shared::{plain, terms_at};

#[tokio::test]
async fn publish_records_each_outcome_and_wakes_every_buyer_but_the_drainer() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, 1..=4).await;
    hold_lease(&sale).await;
    assert_eq!(sale.stock().await, Some(6));
    let e: Vec<Entry> = (0..4).map(|i| entry(i as u64 + 1, t[i])).collect();
    // MySQL holds the three orders named.
    let published = publish_own_counted(
        &sale,
        e[0],
        &[
            ordered(e[0]),
            verdict(e[1], Verdict::Duplicate(order(777), 1)),
            ordered(e[2]),
            verdict(e[3], Verdict::SoldOut),
        ],
        3,
    )
    .await
    .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(
        records(&sale).await,
        BTreeMap::from([
            (1, Record::Ordered(id_of(t[0]), 1)),
            (2, Record::Ordered(order(777), 1)),
            (3, Record::Ordered(id_of(t[2]), 1)),
        ])
    );
    // MySQL had no unit left: Redis's count was ahead.
    assert_eq!(sale.stock().await, Some(0));
    assert!(sale.queue().await.is_empty());
    assert_eq!(sale.lease().await, None);
    assert!(sale.news(e[0]).await.is_empty());
    assert_eq!(
        sale.news(e[1]).await,
        told(Verdict::Duplicate(order(777), 1), t[1])
    );
    assert_eq!(sale.news(e[2]).await, told(Verdict::Ordered, t[2]));
    assert_eq!(sale.news(e[3]).await, told(Verdict::SoldOut, t[3]));
    for entry in &e[1..] {
        let ttl = pttl(&sale, sale.keys().done(*entry)).await;
        assert!(0 < ttl && ttl <= 60_000, "{ttl}");
    }
    assert_eq!(
        sale.admit(buyer(2)).await,
        plain(Decision::AlreadyOrdered(order(777)))
    );
    assert_eq!(sale.admit(buyer(4)).await, plain(Decision::SoldOut));
}

/// A publication is an audit of MySQL's orders: the presses after it do not sweep to
/// audit, unless MySQL holds fewer orders than Redis learnt of once the batch is recorded
/// (a failover lost some): the next press then sweeps, and its audit heals them.
#[tokio::test]
async fn a_publication_finding_mysql_short_of_orders_makes_the_next_press_sweep() {
    for (orders_in_mysql, sweeps) in [(2, false), (1, true)] {
        let sale = Sale::live(5).await;
        let t = admit_all(&sale, 1..=2).await;
        hold_lease(&sale).await;
        let e: Vec<Entry> = (0..2).map(|i| entry(i as u64 + 1, t[i])).collect();
        let batch = [ordered(e[0]), ordered(e[1])];
        let published = publish_own_counted(&sale, e[0], &batch, orders_in_mysql).await;
        assert_eq!(published.unwrap(), Next::Done);
        let sweep_at: Option<i64> = sale.voucher_get("sweep_at").await;
        assert_eq!(
            sweep_at == Some(0),
            sweeps,
            "{orders_in_mysql}: {sweep_at:?}"
        );
        assert_eq!(
            sale.admit(buyer(3)).await.sweep,
            sweeps,
            "{orders_in_mysql}"
        );
    }
}

#[tokio::test]
async fn id_taken_gives_the_unit_back_and_the_buyer_may_buy_again() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, [1, 2]).await;
    hold_lease(&sale).await;
    assert_eq!(sale.stock().await, Some(8));
    let drainer = entry(1, t[0]);
    let published = sale
        .publish(
            &drainer.to_string(),
            Some(drainer),
            &[ordered(drainer), verdict(entry(2, t[1]), Verdict::IdTaken)],
        )
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(sale.stock().await, Some(9));
    assert_eq!(sale.record(buyer(2)).await, None);
    assert_eq!(
        sale.news(entry(2, t[1])).await,
        told(Verdict::IdTaken, t[1])
    );
    let again = sale.admit(buyer(2)).await;
    let t2 = ticket(&again);
    assert_ne!(t2, t[1]);
    assert_eq!(again.lease, lead(entry(2, t2), &[entry(2, t2)]));
    assert_eq!(sale.stock().await, Some(8));
}

/// Whether the voucher is listed as behind MySQL (`GET /health` lists them).
async fn is_stale(sale: &Sale) -> bool {
    sale.conn
        .clone()
        .sismember(STALE, sale.voucher.raw())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_sale_found_behind_mysql_is_missing_until_a_sync() {
    let sale = Sale::live(3).await;
    let t = admit_all(&sale, [1, 2]).await;
    let (e1, e2) = (entry(1, t[0]), entry(2, t[1]));
    let (id1, id2) = (id_of(t[0]), id_of(t[1]));
    // MySQL holds exactly the orders Redis learns of: nothing is amiss.
    hold_lease(&sale).await;
    let published = publish_own_counted(&sale, e1, &[ordered(e1)], 1).await;
    assert_eq!(published.unwrap(), Next::Done);
    assert_eq!(orders_recorded(&sale).await, 1);
    assert_eq!(
        sale.admit(buyer(1)).await,
        plain(Decision::AlreadyOrdered(id1))
    );

    // MySQL holds an order Redis never learnt of: Redis rolled back past it.
    hold_lease(&sale).await;
    let published = publish_own_counted(&sale, e2, &[ordered(e2)], 3).await;
    assert_eq!(published.unwrap(), Next::Done);
    // What MySQL said is recorded all the same; the sale is no sale until a sync.
    assert_eq!(sale.record(buyer(2)).await, Some(Record::Ordered(id2, 1)));
    for user in [1, 3] {
        assert_eq!(
            sale.admit(buyer(user)).await,
            plain(Decision::Missing),
            "{user}"
        );
    }
    assert_eq!(read_view(&sale, sale.voucher).await, Shown::Missing);
    assert!(is_stale(&sale).await);

    // The sync loads MySQL's figures: three orders, no unit left.
    let now = sale.now_ms().await;
    assert!(sale.begin_load("sync").await.unwrap());
    let terms = terms_at(now, 60_000, 0, 3);
    assert!(sale
        .finish_load(Installer::Sync("sync"), &terms)
        .await
        .unwrap());
    assert_eq!(orders_recorded(&sale).await, 3);
    assert_eq!(
        sale.admit(buyer(1)).await,
        first_after_sync(Decision::AlreadyOrdered(id1))
    );
    assert_eq!(
        sale.admit(buyer(3)).await,
        behind_a_sweep(Decision::SoldOut)
    );
    assert!(!is_stale(&sale).await);
}

#[tokio::test]
async fn a_publish_after_redis_lost_the_sale_never_passes_for_a_sale() {
    let sale = Sale::live(2).await;
    let t = admit_all(&sale, [1, 2]).await;
    hold_lease(&sale).await;
    // Redis loses the voucher's terms (a restart without persistence).
    sale.lose(&[sale.keys().voucher()]).await;
    let published = publish_own(
        &sale,
        entry(1, t[0]),
        &[
            verdict(entry(1, t[0]), Verdict::SoldOut),
            verdict(entry(2, t[1]), Verdict::IdTaken),
        ],
    )
    .await
    .unwrap();
    assert_eq!(published, Next::Done);
    let voucher = sale.keys().voucher();
    let exists: bool = sale.conn.clone().exists(&voucher).await.unwrap();
    assert!(!exists, "a publication created the voucher's hash");
    assert!(sale.records().await.is_empty());
    // Buyers hear "missing" (503, sync needed), not a script error.
    assert_eq!(sale.admit(buyer(3)).await, plain(Decision::Missing));
}
