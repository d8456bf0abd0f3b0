//! `lua/stage.lua` and `lua/load.lua`: a sync staging MySQL's buyers and loading its terms.

use std::collections::BTreeMap;

use seckill_core::sale::{Decision, Installer, Next, Record, Terms};
use seckill_core::verdict::Verdict;
use seckill_core::{OrderId, UserId};
use seckill_tests::drivers::scripts::Sale;

use super::{
    admit_all, buyer, entry, first_after_sync, hold_lease, id_of, order, ordered, publish_own,
    records, state, ticket, told, verdict,
};
use crate::backends::shared::{plain, terms_at};

/// Terms of a sale live for the minute around now.
async fn live_terms(sale: &Sale, stock: u64, initial_stock: u64) -> Terms {
    terms_at(sale.now_ms().await, 60_000, stock, initial_stock)
}

/// A sale of 2 units, one of them ordered by buyer 1 as order 101.
async fn one_of_two_ordered() -> Sale {
    let sale = Sale::live(2).await;
    sale.load_live(1, &[(buyer(1), order(101))]).await;
    sale
}

/// A sync under `token` of one page of `buyers`, then its install of `terms`: whether
/// each took.
async fn sync_page(
    sale: &Sale,
    token: &str,
    buyers: &[(UserId, OrderId)],
    terms: &Terms,
) -> (bool, bool) {
    let staged = sale.stage_buyers(token, buyers).await.unwrap();
    let installer = Installer::Sync(token);
    (staged, sale.finish_load(installer, terms).await.unwrap())
}

#[tokio::test]
async fn overlapping_syncs_never_forget_a_buyer() {
    let sale = one_of_two_ordered().await;
    let terms = live_terms(&sale, 1, 2).await;
    // Sync a stages buyer 1; an admin's retry (sync b) cannot begin meanwhile.
    assert!(sale.begin_load("a").await.unwrap());
    assert!(sale
        .stage_buyers("a", &[(buyer(1), order(101))])
        .await
        .unwrap());
    assert!(!sale.begin_load("b").await.unwrap());
    // Sync a stalls past its lease; b begins, stages and finishes.
    sale.expire_sync_lease().await;
    assert!(sale.begin_load("b").await.unwrap());
    let page = [(buyer(1), order(101))];
    assert_eq!(sync_page(&sale, "b", &page, &terms).await, (true, true));
    // Sync a comes back: refused, changing nothing.
    let before = state(&sale).await;
    let page = [(buyer(2), order(202))];
    assert_eq!(sync_page(&sale, "a", &page, &terms).await, (false, false));
    assert_eq!(state(&sale).await, before);
    assert_eq!(
        sale.record(buyer(1)).await,
        Some(Record::Ordered(order(101), 1))
    );
    assert_eq!(
        sale.admit(buyer(1)).await,
        first_after_sync(Decision::AlreadyOrdered(order(101)))
    );
    assert_eq!(sale.stock().await, Some(1));
}

#[tokio::test]
async fn a_sync_keeps_what_purchases_record_while_it_runs() {
    // Sync a reads MySQL (no orders yet); buyer 2's purchase then commits and is
    // published; sync a finishes: buyer 2's order must still be known.
    let sale = Sale::live(1).await;
    assert!(sale.begin_load("a").await.unwrap());
    let t2 = ticket(&sale.admit(buyer(2)).await);
    assert!(sale.stage_buyers("a", &[]).await.unwrap());
    let id = id_of(t2);
    let published = publish_own(&sale, entry(2, t2), &[ordered(entry(2, t2))])
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    assert!(sale
        .finish_load(Installer::Sync("a"), &live_terms(&sale, 1, 1).await)
        .await
        .unwrap());
    assert_eq!(
        sale.admit(buyer(2)).await,
        first_after_sync(Decision::AlreadyOrdered(id))
    );
}

#[tokio::test]
async fn a_sync_that_lost_its_lease_changes_nothing() {
    // As after a Redis restart in the middle of a sync: the lease is gone.
    let sale = one_of_two_ordered().await;
    assert!(sale.begin_load("a").await.unwrap());
    sale.expire_sync_lease().await;
    let before = state(&sale).await;
    let terms = live_terms(&sale, 0, 2).await;
    let page = [(buyer(3), order(303))];
    assert_eq!(sync_page(&sale, "a", &page, &terms).await, (false, false));
    assert_eq!(state(&sale).await, before);
    assert_eq!(sale.record(buyer(3)).await, None);
    assert_eq!(sale.stock().await, Some(1));
}

#[tokio::test]
async fn a_load_installs_mysqls_buyers_and_keeps_the_queue() {
    let sale = Sale::live(10).await;
    let t = admit_all(&sale, [1, 7]).await;
    hold_lease(&sale).await;
    let now = sale.now_ms().await;
    // Buyer 7's queued purchase is a repeat: MySQL already holds her order 700.
    sale.load(
        8,
        now - 1000,
        now + 60_000,
        &[
            (buyer(5), order(500)),
            (buyer(6), order(600)),
            (buyer(7), order(700)),
        ],
    )
    .await;
    assert_eq!(sale.stock().await, Some(8));
    assert_eq!(
        records(&sale).await,
        BTreeMap::from([
            (1, Record::Queued(t[0])),
            (5, Record::Ordered(order(500), 1)),
            (6, Record::Ordered(order(600), 1)),
            (7, Record::Ordered(order(700), 1)),
        ])
    );
    assert_eq!(sale.queue().await, [entry(1, t[0]), entry(7, t[1])]);
    assert_eq!(
        sale.admit(buyer(5)).await,
        first_after_sync(Decision::AlreadyOrdered(order(500)))
    );
    assert_eq!(
        sale.admit(buyer(7)).await,
        plain(Decision::AlreadyOrdered(order(700)))
    );
    // Its commit finds her order and publishes it.
    let published = publish_own(
        &sale,
        entry(1, t[0]),
        &[
            ordered(entry(1, t[0])),
            verdict(entry(7, t[1]), Verdict::Duplicate(order(700), 1)),
        ],
    )
    .await
    .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(
        sale.record(buyer(7)).await,
        Some(Record::Ordered(order(700), 1))
    );
    assert_eq!(
        sale.news(entry(7, t[1])).await,
        told(Verdict::Duplicate(order(700), 1), t[1])
    );
    assert_eq!(sale.stock().await, Some(8));
}
