//! `lua/metrics.lua` and `lua/count.lua`: a sale's counters and figures.

use std::collections::BTreeMap;

use redis::AsyncCommands;
use seckill_core::redis::{args, Command};
use seckill_core::sale::{
    Call, Count, Counted, Decision, Entry, Figures, Next, ReadFigures, KEPT_AFTER_END_MS,
};
use seckill_core::verdict::Verdict;
use seckill_tests::drivers::scripts::Sale;

use super::{
    admit_all, buyer, entry, expire_at, hold_lease, id_of, order, ordered, orders_recorded, pttl,
    publish_own_counted, verdict,
};
use crate::backends::shared::plain;

/// The voucher's counters, as `lua/metrics.lua` hands them to `GET /metrics`.
async fn counters(sale: &Sale) -> BTreeMap<String, i64> {
    sale.conn
        .clone()
        .hgetall(sale.keys().metrics())
        .await
        .unwrap()
}

#[tokio::test]
async fn the_counters_count_each_decision_verdict_and_batch_and_each_order_once() {
    let sale = Sale::live(3).await;
    let t = admit_all(&sale, 1..=3).await;
    hold_lease(&sale).await;
    assert_eq!(sale.admit(buyer(1)).await, plain(Decision::Queued(t[0])));
    assert_eq!(sale.admit(buyer(4)).await, plain(Decision::SoldOut));
    let e: Vec<Entry> = (0..3).map(|i| entry(i as u64 + 1, t[i])).collect();
    let batch = [
        ordered(e[0]),
        verdict(e[1], Verdict::Duplicate(order(777), 1)),
    ];
    assert_eq!(
        sale.publish("someone", None, &batch).await.unwrap(),
        Next::Lost
    );
    // The refused publication recorded the two orders MySQL holds: counted once, there.
    let publish = |own, batch| publish_own_counted(&sale, own, batch, 2);
    assert_eq!(publish(e[0], &batch).await.unwrap(), Next::Done);
    assert_eq!(
        sale.admit(buyer(1)).await,
        plain(Decision::AlreadyOrdered(id_of(t[0])))
    );
    hold_lease(&sale).await;
    let last = [verdict(e[2], Verdict::SoldOut)];
    assert_eq!(publish(e[2], &last).await.unwrap(), Next::Done);

    let outcomes = [
        ("purchase:admitted", 3),
        ("purchase:queued", 1),
        ("purchase:sold_out", 1),
        ("purchase:already_ordered", 1),
        ("batch:count", 2),
        ("batch:sum", 3),
        // The units of the orders committed, an order of one unit here.
        ("units:sold", 1),
    ];
    let commits = [
        Verdict::Ordered,
        Verdict::Duplicate(order(777), 1),
        Verdict::SoldOut,
    ];
    // Batches of 1 and 2 purchases: `le` buckets count the batches at most that large.
    let batches = [(1, 1), (4, 2), (16, 2), (64, 2), (256, 2)];
    let expected: BTreeMap<String, i64> = outcomes
        .map(|(name, count)| (name.to_string(), count))
        .into_iter()
        .chain(commits.map(|verdict| (format!("commit:{}", verdict.tag()), 1)))
        .chain(batches.map(|(le, count)| (format!("batch:le:{le}"), count)))
        .collect();
    assert_eq!(counters(&sale).await, expected);
    // The orders Redis learnt of, each once: the voucher's "orders".
    assert_eq!(orders_recorded(&sale).await, 2);
}

#[tokio::test]
async fn an_outcome_counted_after_admission_never_leaves_a_counter_for_good() {
    let sale = Sale::live(5).await;
    admit_all(&sale, [1]).await;
    let metrics = sale.keys().metrics();
    let count = |outcome: &'static str| Count {
        voucher_id: sale.voucher,
        counted: Counted::Purchase(outcome),
    };
    let sale_s_end = expire_at(&sale, metrics.clone()).await;
    for outcome in ["busy", "busy", "unavailable"] {
        sale.call(&count(outcome)).await.unwrap();
    }
    let counted = counters(&sale).await;
    assert_eq!(
        (counted["purchase:busy"], counted["purchase:unavailable"]),
        (2, 1)
    );
    assert_eq!(
        expire_at(&sale, metrics.clone()).await,
        sale_s_end,
        "the sale's expiry moved"
    );

    // Redis lost the sale meanwhile: the counter it starts expires by itself.
    sale.lose(&[sale.keys().voucher(), metrics.clone()]).await;
    sale.call(&count("busy")).await.unwrap();
    assert_eq!(
        counters(&sale).await,
        BTreeMap::from([("purchase:busy".to_string(), 1)])
    );
    let ttl = pttl(&sale, metrics.clone()).await;
    assert!(0 < ttl && ttl <= KEPT_AFTER_END_MS, "{ttl}");
}

/// `lua/metrics.lua` for the sale, reporting sales that ended up to `after_end_ms` ago.
async fn figures(sale: &Sale, after_end_ms: i64) -> Option<Figures> {
    // The component's command reports sales until `REPORTED_AFTER_END_MS` (an hour)
    // after their end; the test puts its own bound in its place.
    let read = ReadFigures {
        voucher_id: sale.voucher,
    };
    let mut command = read.command();
    let Command::Script { args, .. } = &mut command else {
        panic!("metrics is a script")
    };
    *args = args![reported_ms = after_end_ms];
    sale.call_as(&read, &command).await.unwrap()
}

#[tokio::test]
async fn metrics_reads_a_sale_at_one_instant_until_a_while_after_its_end() {
    let sale = Sale::live(5).await;
    admit_all(&sale, [1, 2]).await;
    let figures_now = figures(&sale, 0).await;
    assert_eq!(
        figures_now,
        Some(Figures {
            units_left: 3,
            units_initial: 5,
            queued: 2,
            orders: 0,
            stale: false,
            mysql_missing: 0,
            in_line: 0,
            counters: vec![("purchase:admitted".to_string(), 2)],
        })
    );
    let now = sale.now_ms().await;
    sale.load(3, now - 120_000, now - 60_000, &[]).await;
    assert!(figures(&sale, 61_000).await.is_some());
    assert_eq!(figures(&sale, 59_000).await, None);
    sale.lose(&[sale.keys().voucher()]).await;
    assert_eq!(figures(&sale, 61_000).await, None);
}
