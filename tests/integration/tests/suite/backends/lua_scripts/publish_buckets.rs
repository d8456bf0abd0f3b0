//! `lua/publish.lua` in a sale in buckets (docs/design.md, "Buckets"): the units its verdicts
//! give back, and the all-out mark they clear.

use redis::AsyncCommands;
use seckill_core::sale::{Claimed, Decision, News, Next};
use seckill_core::verdict::Verdict;
use seckill_tests::drivers::scripts::{outcome, Sale};

use super::{admit_routed, buyer, entry, hold_lease, order, ordered, ticket, verdict};

#[tokio::test]
async fn an_order_of_another_bucket_gives_the_unit_back_and_answers_already_ordered() {
    let buckets = Sale::live_buckets(4, 2).await;
    let sale = &buckets[1];
    let t = ticket(&admit_routed(sale, 1).await);
    let other = ticket(&admit_routed(sale, 2).await);
    hold_lease(sale).await;
    assert_eq!(sale.stock().await, Some(0));
    let held = order(4242);
    let (mine, theirs) = (entry(1, t), entry(2, other));
    let published = sale
        .publish(
            &mine.to_string(),
            Some(mine),
            &[ordered(mine), verdict(theirs, Verdict::Elsewhere(held))],
        )
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    // Her unit is back in this bucket, no order of this bucket is counted for her, and
    // she hears of her order wherever she asks here.
    assert_eq!(sale.stock().await, Some(1));
    assert_eq!(
        sale.news(theirs).await,
        [outcome(Verdict::Elsewhere(held), held)]
    );
    assert_eq!(
        admit_routed(sale, 2).await.decision,
        Decision::AlreadyOrdered(held)
    );
    assert_eq!(
        sale.claim(theirs).await.unwrap(),
        Claimed::News(News::Verdict(Verdict::Elsewhere(held)))
    );
    assert_eq!(sale.claim(theirs).await.unwrap(), Claimed::Held(held));
    let orders: Option<u64> = sale.voucher_get("orders").await;
    assert_eq!(orders, Some(1), "only this bucket's order");
}

#[tokio::test]
async fn a_unit_a_publication_gives_back_clears_the_bucket_s_all_out_mark() {
    for given_back in [Verdict::Elsewhere(order(4343)), Verdict::IdTaken] {
        let buckets = Sale::live_buckets(2, 2).await;
        let sale = &buckets[1];
        let mine = entry(1, ticket(&admit_routed(sale, 1).await));
        hold_lease(sale).await;
        assert!(sale.mark_all_out().await, "every bucket's unit taken");
        let published = sale
            .publish(&mine.to_string(), Some(mine), &[verdict(mine, given_back)])
            .await
            .unwrap();
        assert_eq!(published, Next::Done);
        // The unit is back, and the bucket's own buyers buy it at once.
        assert_eq!(sale.stock().await, Some(1), "{given_back:?}");
        assert!(!sale.all_out().await, "{given_back:?}: the mark stands");
        assert!(
            matches!(admit_routed(sale, 3).await.decision, Decision::Admitted(_)),
            "{given_back:?}"
        );
    }
}

#[tokio::test]
async fn no_unit_comes_back_after_a_sold_out_verdict_of_the_same_batch() {
    // MySQL had no unit for the batch (Redis was ahead): a purchase it did not take for
    // another reason gives back no unit MySQL has, whatever its place in the batch.
    for given_back in [
        Verdict::Elsewhere(order(4545)),
        Verdict::Cancelled(order(4545)),
        Verdict::IdTaken,
    ] {
        let buckets = Sale::live_buckets(4, 2).await;
        let sale = &buckets[1];
        let first = entry(1, ticket(&admit_routed(sale, 1).await));
        let second = entry(2, ticket(&admit_routed(sale, 2).await));
        hold_lease(sale).await;
        let batch = [
            verdict(first, Verdict::SoldOut),
            verdict(second, given_back),
        ];
        let published = sale
            .publish(&first.to_string(), None, &batch)
            .await
            .unwrap();
        assert_eq!(published, Next::Done);
        assert_eq!(sale.stock().await, Some(0), "{given_back:?}");
    }
}

#[tokio::test]
async fn a_purchase_no_longer_queued_gives_back_no_unit_a_second_time() {
    // A heal already gave her unit back and recorded her order in the other bucket (her
    // order of this bucket was lost by MySQL, its queue entry left behind by a drainer
    // whose lease lapsed); the entry's commit again says elsewhere.
    let held = order(4646);
    let buckets = Sale::live_buckets(2, 2).await;
    let sale = &buckets[1];
    let mine = entry(1, ticket(&admit_routed(sale, 1).await));
    hold_lease(sale).await;
    let _: () = sale
        .conn
        .clone()
        .hset(sale.keys().buyers(), 1, format!("e:{held}"))
        .await
        .unwrap();
    let _: () = sale
        .conn
        .clone()
        .hincr(sale.keys().voucher(), "stock", 1)
        .await
        .unwrap();
    let published = sale
        .publish(
            &mine.to_string(),
            None,
            &[verdict(mine, Verdict::Elsewhere(held))],
        )
        .await
        .unwrap();
    assert_eq!(published, Next::Done);
    assert_eq!(sale.stock().await, Some(1), "the one unit, once");
    assert_eq!(sale.raw_record(buyer(1)).await, Some(format!("e:{held}")));
}

#[tokio::test]
async fn a_dead_order_of_another_bucket_is_her_record_here_and_gives_the_unit_back() {
    let held = order(4444);
    for (dead, decision) in [
        (Verdict::Cancelled(held), Decision::Cancelled(held)),
        (Verdict::Expired(held), Decision::Expired(held)),
    ] {
        let buckets = Sale::live_buckets(2, 2).await;
        let sale = &buckets[1];
        let mine = entry(1, ticket(&admit_routed(sale, 1).await));
        hold_lease(sale).await;
        assert!(sale.mark_all_out().await);
        // Published by another buyer's request, which wakes hers.
        let published = sale
            .publish(&mine.to_string(), None, &[verdict(mine, dead)])
            .await
            .unwrap();
        assert_eq!(published, Next::Done);
        // Her unit is back (the mark gone), no order of this bucket is counted for her,
        // and she hears what became of her order wherever she asks here.
        assert_eq!(sale.stock().await, Some(1));
        assert!(!sale.all_out().await);
        assert_eq!(sale.news(mine).await, [outcome(dead, held)]);
        assert_eq!(admit_routed(sale, 1).await.decision, decision);
        let orders = sale.voucher_field("orders").await;
        assert_eq!(orders.unwrap_or(0), 0, "no order of this bucket's");
    }
}
