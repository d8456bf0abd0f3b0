//! A sale in buckets (docs/design.md, "Buckets"): `lua/admission.lua` routing a buyer and
//! its sightings (`lua/admission/sightings.lua`), `lua/walk_end.lua`, the all-out marks and
//! `lua/reopen.lua`.

use redis::AsyncCommands;
use seckill_core::buckets::ALL_OUT_MS;
use seckill_core::sale::{
    Admission, Decision, EndSale, MarkAllOut, Marked, Pointer, Reopen, Route, Sighting, Sightings,
    WalkEnd, WalkEnded,
};
use seckill_tests::drivers::scripts::Sale;

use super::{admit_on, admit_routed, admit_seeing, assert_admitted, buyer, give_one_back, ticket};
use crate::backends::shared::plain;

/// When `sale`'s bucket last saw the bucket at `place` sold out, as its sightings keep it.
async fn told_at(sale: &Sale, place: usize) -> i64 {
    sale.conn
        .clone()
        .hget(sale.keys().seen_out(), place)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_bucket_marks_itself_all_out_once_presses_and_walks_saw_every_bucket_sold_out() {
    let buckets = Sale::live_buckets(3, 3).await;
    // Buyers 6, 7 and 8 take the buckets' units, each at hers (her id modulo 3).
    for (place, bucket) in buckets.iter().enumerate() {
        assert_admitted(&admit_routed(bucket, 6 + place as u64).await);
    }
    let [first, second, third] = &buckets[..] else {
        panic!("three buckets")
    };
    let at = |here, seen: &[Sighting]| Sightings {
        buckets: 3,
        here,
        seen: seen.to_vec(),
        created: 0,
    };
    let places = |seen: &[Sighting]| seen.iter().map(|(place, _)| *place).collect::<Vec<_>>();
    // Buyer 9's bucket is the first: sold out, it sends her on with what it saw.
    let home = admit_seeing(first, 9, Route::Home, at(0, &[])).await;
    assert_eq!(home.decision, Decision::BucketOut);
    assert_eq!(places(&home.seen_out), [0]);
    // A sighting older than the mark's moment counts for nothing.
    let said = admit_seeing(second, 9, Route::LoneWalk, at(1, &[(0, 1), (2, 1)])).await;
    assert_eq!(places(&said.seen_out), [1]);
    let said = admit_seeing(second, 9, Route::LoneWalk, at(1, &home.seen_out)).await;
    assert_eq!(said.decision, Decision::BucketOut);
    assert_eq!(places(&said.seen_out), [0, 1]);
    assert!(!second.all_out().await);
    // The third, told of the other two, has seen them all: it marks itself, and hands her
    // lone walk every sighting (the walk goes on, to mark the others).
    let told = admit_seeing(third, 9, Route::LoneWalk, at(2, &said.seen_out)).await;
    assert_eq!(told.decision, Decision::BucketOut);
    assert_eq!(places(&told.seen_out), [0, 1, 2]);
    assert!(third.all_out().await);
    // A lone walk meeting that mark later ends there.
    let lone = admit_seeing(third, 10, Route::LoneWalk, at(2, &[])).await;
    assert_eq!(lone.decision, Decision::SoldOut);
    assert_eq!(admit_routed(third, 5).await.decision, Decision::SoldOut);
    // A bucket hands a walk what it saw and what other presses told it: buyer 14, whose
    // bucket is the third (marked, so seen sold out just now), asks the first, and brings
    // both sightings to the second, which now has seen all three and marks itself.
    let said = admit_seeing(first, 14, Route::LoneWalk, at(0, &[])).await;
    assert_eq!(places(&said.seen_out), [0]);
    assert!(!first.all_out().await);
    let mut seen = said.seen_out.clone();
    seen.push((2, told_at(third, 2).await));
    let said = admit_seeing(second, 14, Route::LoneWalk, at(1, &seen)).await;
    assert_eq!(
        (said.decision, places(&said.seen_out)),
        (Decision::BucketOut, vec![0, 1, 2])
    );
    assert!(second.all_out().await);
    // A walk with others of hers under way learns nothing from a mark.
    let walk = admit_seeing(second, 11, Route::Walk, at(1, &[])).await;
    assert_eq!(walk.decision, Decision::BucketOut);
}

#[tokio::test]
async fn a_sale_in_buckets_names_them_and_a_sold_out_bucket_sends_the_buyer_on() {
    let buckets = Sale::live_buckets(3, 3).await;
    let [first, second, third] = &buckets[..] else {
        panic!("three buckets")
    };
    // A press that does not know the buckets learns them from the first, which decides
    // nothing for it.
    let asked = first.admit(buyer(5)).await;
    assert_eq!(
        asked,
        Admission {
            others: vec![second.voucher, third.voucher],
            ..plain(Decision::Buckets)
        }
    );
    assert_eq!(first.stock().await, Some(1));
    // Each bucket sells its own unit, and then sends buyers on, until a press that found
    // every bucket empty marks its buyer's bucket: that one answers sold_out by itself.
    let admitted = admit_routed(second, 5).await;
    assert!(
        matches!(admitted.decision, Decision::Admitted(_)),
        "{admitted:?}"
    );
    assert_eq!(admit_routed(second, 6).await.decision, Decision::BucketOut);
    assert_eq!(
        admit_routed(second, 5).await.decision,
        admitted_again(&admitted)
    );
    assert_eq!(walk_found_nothing(second, 6).await, WalkEnded::Marked);
    assert_eq!(admit_routed(second, 6).await.decision, Decision::SoldOut);
    // Not while the bucket has a unit: its buyers buy it.
    assert_eq!(walk_found_nothing(third, 7).await, WalkEnded::Open);
    assert_admitted(&admit_routed(third, 7).await);
    // A unit given back clears the mark: the bucket's buyers buy it at once.
    give_one_back(second).await;
    assert_admitted(&admit_routed(second, 6).await);
}

/// What a second press of an admitted buyer hears: her purchase, still queued.
fn admitted_again(admitted: &Admission) -> Decision {
    Decision::Queued(ticket(admitted))
}

/// The end of a walk of `user`'s that found nothing, counted by her bucket `sale`.
async fn walk_found_nothing(sale: &Sale, user: u64) -> WalkEnded {
    sale.call(&WalkEnd {
        home: sale.voucher,
        buyer: buyer(user),
        found: None,
        started: Some(Pointer::Counted),
        empty: true,
        since: sale.now_ms().await,
    })
    .await
    .unwrap()
}

/// A sale of two buckets of a unit each, the first's sold to buyer 4.
async fn home_sold_out() -> [Sale; 2] {
    let buckets = Sale::live_buckets(2, 2).await;
    assert_admitted(&admit_routed(&buckets[0], 4).await);
    buckets.try_into().unwrap_or_else(|_| panic!("two buckets"))
}

#[tokio::test]
async fn a_walked_buyer_s_bucket_sends_her_to_her_purchase_whatever_its_mark_or_the_end() {
    let [home, other] = &home_sold_out().await;
    // Buyer 2 walks from her sold-out bucket to the other and is admitted there; the walk
    // points her bucket at it.
    assert_eq!(admit_routed(home, 2).await.decision, Decision::BucketOut);
    let admitted = admit_on(other, 2, Route::Walk).await;
    assert!(matches!(admitted.decision, Decision::Admitted(_)));
    let pointed = home
        .call(&WalkEnd {
            home: home.voucher,
            buyer: buyer(2),
            found: Some(other.voucher),
            started: Some(Pointer::Counted),
            empty: true,
            since: home.now_ms().await,
        })
        .await
        .unwrap();
    assert_eq!(pointed, WalkEnded::Pointed);
    // Buyer 6 finds every bucket empty and marks it; buyer 2 is still sent to hers.
    assert_eq!(admit_routed(home, 6).await.decision, Decision::BucketOut);
    assert_eq!(walk_found_nothing(home, 6).await, WalkEnded::Marked);
    assert_eq!(admit_routed(home, 6).await.decision, Decision::SoldOut);
    assert_eq!(
        admit_routed(home, 2).await.decision,
        Decision::Walked(other.voucher)
    );
    // A bucket's mark does not stop a walk: it answers bucket_out, never sold_out. But
    // a buyer's only walk under way ends there: no bucket holds a record of hers.
    assert_eq!(
        admit_on(other, 6, Route::LoneWalk).await.decision,
        Decision::BucketOut,
        "not marked yet"
    );
    assert_eq!(
        admit_on(other, 6, Route::Home).await.decision,
        Decision::BucketOut
    );
    assert_eq!(walk_found_nothing(other, 6).await, WalkEnded::Marked);
    assert_eq!(
        admit_on(other, 8, Route::Walk).await.decision,
        Decision::BucketOut
    );
    assert_eq!(
        admit_on(other, 8, Route::LoneWalk).await.decision,
        Decision::SoldOut
    );
    // Her record there answers before the mark.
    assert_eq!(
        admit_on(other, 2, Route::LoneWalk).await.decision,
        admitted_again(&admitted)
    );
    // Buyer 10 has a walk under way (counted at her bucket): every press of hers that
    // her bucket cannot serve walks every bucket too, counted until it ends, and her
    // bucket answers for itself again once the last walk ended.
    assert_eq!(admit_routed(home, 10).await.decision, Decision::SoldOut);
    home.conn
        .clone()
        .hset::<_, _, _, ()>(home.keys().buyers(), "10", "p:1")
        .await
        .unwrap();
    assert_eq!(
        admit_routed(home, 10).await.decision,
        Decision::Walk { ended: false }
    );
    walk_found_nothing(home, 10).await;
    for sale in [home, other] {
        assert!(sale
            .call(&EndSale {
                voucher_id: sale.voucher
            })
            .await
            .unwrap());
    }
    assert_eq!(
        admit_routed(home, 10).await.decision,
        Decision::Walk { ended: true }
    );
    assert_eq!(
        admit_routed(home, 2).await.decision,
        Decision::Walked(other.voucher)
    );
    assert_eq!(
        admit_on(other, 2, Route::Walk).await.decision,
        admitted_again(&admitted)
    );
    assert_eq!(admit_routed(home, 6).await.decision, Decision::Ended);
    // A walk that followed a pointer clears that pointer, not another record.
    home.call(&WalkEnd {
        home: home.voucher,
        buyer: buyer(10),
        found: None,
        started: Some(Pointer::At(other.voucher)),
        empty: true,
        since: home.now_ms().await,
    })
    .await
    .unwrap();
    walk_found_nothing(home, 10).await;
    assert_eq!(
        admit_routed(home, 10).await.decision,
        Decision::Walk { ended: true }
    );
    walk_found_nothing(home, 10).await;
    walk_found_nothing(home, 10).await;
    assert_eq!(admit_routed(home, 10).await.decision, Decision::Ended);
}

#[tokio::test]
async fn a_walk_marks_another_bucket_all_out_only_while_it_is_sold_out() {
    let [home, other] = &home_sold_out().await;
    assert!(!other.mark_all_out().await, "it has a unit");
    assert!(!other.all_out().await);
    assert!(home.mark_all_out().await);
    assert_eq!(
        home.call(&MarkAllOut {
            bucket: home.voucher,
            since: home.now_ms().await,
        })
        .await
        .unwrap(),
        Marked::Before,
        "another walk marks the buckets"
    );
    assert_eq!(admit_routed(home, 6).await.decision, Decision::SoldOut);
    // No buyer's record was touched.
    assert!(matches!(
        admit_routed(home, 4).await.decision,
        Decision::Queued(_)
    ));
}

/// A sale of two buckets of a unit each, both sold (to buyers 4 and 5).
async fn both_sold_out() -> [Sale; 2] {
    let buckets = home_sold_out().await;
    assert_admitted(&admit_routed(&buckets[1], 5).await);
    buckets
}

/// A bucket reopened (units came back to another bucket of its sale) refuses every mark
/// resting on what was seen before it, whatever a walk or the sightings say; what is seen
/// after it marks it again.
#[tokio::test]
async fn a_reopened_bucket_is_marked_all_out_by_nothing_seen_before() {
    let [home, _] = &both_sold_out().await;
    assert!(home.mark_all_out().await, "both sold out");
    assert_eq!(admit_routed(home, 6).await.decision, Decision::SoldOut);
    let seen = home.now_ms().await;
    home.call(&Reopen {
        bucket: home.voucher,
    })
    .await
    .unwrap();
    assert!(!home.all_out().await);
    // Her press walks again, and no walk resting on what it saw before marks it...
    assert_eq!(admit_routed(home, 6).await.decision, Decision::BucketOut);
    let stale = MarkAllOut {
        bucket: home.voucher,
        since: seen,
    };
    assert_eq!(home.call(&stale).await.unwrap(), Marked::Open);
    // ...nor sightings of both buckets sold out then.
    let sightings = Sightings {
        buckets: 2,
        here: 1,
        seen: vec![(0, seen), (1, seen)],
        created: 0,
    };
    let said = admit_seeing(home, 7, Route::LoneWalk, sightings).await;
    assert_eq!(said.decision, Decision::BucketOut);
    assert!(!home.all_out().await, "sightings marked a reopened bucket");
    // A walk that saw them all empty since marks it again.
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    assert!(home.mark_all_out().await);
    assert_eq!(admit_routed(home, 8).await.decision, Decision::SoldOut);
}

/// A mark handed on lasts no longer than the sightings behind the first: a lone walk that a
/// mark ended marks her bucket until that mark's end, not a full mark's life from now.
#[tokio::test]
async fn a_mark_passed_on_ends_with_the_mark_it_came_from() {
    let [home, other] = &both_sold_out().await;
    let now = home.now_ms().await;
    let old = now - ALL_OUT_MS + 1_000;
    let marking = |bucket: &Sale, since| MarkAllOut {
        bucket: bucket.voucher,
        since,
    };
    assert_eq!(other.call(&marking(other, old)).await.unwrap(), Marked::Now);
    let mut redis = other.conn.clone();
    let left: i64 = redis.pttl(other.keys().all_out()).await.unwrap();
    assert!(left > 0 && left <= 1_000, "{left} ms left");
    // The mark hands its age to the walk it ends...
    let said = admit_seeing(
        other,
        7,
        Route::LoneWalk,
        Sightings {
            buckets: 2,
            here: 1,
            seen: Vec::new(),
            created: 0,
        },
    )
    .await;
    assert_eq!(said.decision, Decision::SoldOut);
    assert_eq!(said.seen_out, [(1, old)]);
    // ...whose mark of her bucket then ends with it; one resting on older ones, at once.
    assert_eq!(home.call(&marking(home, old)).await.unwrap(), Marked::Now);
    let left: i64 = home.conn.clone().pttl(home.keys().all_out()).await.unwrap();
    assert!(left > 0 && left <= 1_000, "{left} ms left");
    let _: () = home.conn.clone().del(home.keys().all_out()).await.unwrap();
    let older = now - ALL_OUT_MS - 1;
    assert_eq!(
        home.call(&marking(home, older)).await.unwrap(),
        Marked::Open
    );
}
