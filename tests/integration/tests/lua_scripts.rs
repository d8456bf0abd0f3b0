//! The Lua scripts in `lua/`, run against the real Redis exactly as the component calls
//! them: the same keys, arguments and replies.

use std::collections::HashSet;
use std::time::Duration;

use redis::{AsyncCommands, Value};
use seckill_tests::backends::{fresh_voucher_id, key, redis};
use seckill_tests::scripts::{Admission as Reply, Sale, Terms, LONG_TTL, SEQUENCE_PREFIX, VIEW};

#[tokio::test]
async fn stock_s_admits_exactly_s_of_many_concurrent_buyers() {
    let sale = Sale::live(20).await;
    let mut tasks = Vec::new();
    for user in 1..=300u64 {
        // One connection per caller, as each Spin instance opens its own.
        let sale = sale.another_connection().await;
        tasks.push(tokio::spawn(async move {
            sale.admit(user, &format!("t{user}"), LONG_TTL).await
        }));
    }
    let mut admitted = 0;
    let mut sequences = HashSet::new();
    for task in tasks {
        match task.await.unwrap() {
            Reply::Admitted { seconds, sequence } => {
                admitted += 1;
                assert!(
                    sequences.insert((seconds, sequence)),
                    "order id handed out twice"
                );
            }
            Reply::SoldOut => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(admitted, 20);
    assert_eq!(sale.stock().await, Some(0));
    assert_eq!(sale.pending().await.len(), 20);
}

#[tokio::test]
async fn one_buyer_is_admitted_at_most_once() {
    let sale = Sale::live(100).await;
    let mut tasks = Vec::new();
    for attempt in 0..40 {
        let sale = sale.another_connection().await;
        tasks.push(tokio::spawn(async move {
            sale.admit(7, &format!("t{attempt}"), LONG_TTL).await
        }));
    }
    let mut replies = Vec::new();
    for task in tasks {
        replies.push(task.await.unwrap());
    }
    let admitted = replies
        .iter()
        .filter(|r| matches!(r, Reply::Admitted { .. }))
        .count();
    let busy = replies
        .iter()
        .filter(|r| matches!(r, Reply::Busy { .. }))
        .count();
    assert_eq!((admitted, busy), (1, 39));
    assert_eq!(sale.stock().await, Some(99));
}

#[tokio::test]
async fn undo_restores_exactly_what_its_reservation_took() {
    let sale = Sale::live(5).await;
    for user in [1, 2, 3] {
        assert!(matches!(
            sale.admit(user, &format!("t{user}"), LONG_TTL).await,
            Reply::Admitted { .. }
        ));
    }
    assert_eq!(sale.stock().await, Some(2));

    // Someone else's token settles nothing, and leaves the lock alone.
    assert!(!sale.unlock(2, "t1", "undo", "").await);
    assert_eq!(sale.stock().await, Some(2));
    assert_eq!(sale.lock(2).await.as_deref(), Some("t2"));

    assert!(sale.unlock(2, "t2", "undo", "").await);
    assert_eq!(sale.stock().await, Some(3));
    // Unsettled: the purchase may have committed without its answer reaching us.
    assert_eq!(sale.record(2).await.as_deref(), Some("u"));
    assert_eq!(sale.lock(2).await, None);
    assert_eq!(sale.pending().await, vec!["1".to_string(), "3".to_string()]);

    // Idempotent: the same undo again changes nothing.
    assert!(!sale.unlock(2, "t2", "undo", "").await);
    assert_eq!(sale.stock().await, Some(3));

    // The buyer is free to try again.
    assert!(matches!(
        sale.admit(2, "t2b", LONG_TTL).await,
        Reply::Admitted { .. }
    ));
    assert_eq!(sale.stock().await, Some(2));
}

#[tokio::test]
async fn an_ordered_buyer_is_turned_away_with_the_order_id() {
    let sale = Sale::live(5).await;
    assert!(matches!(
        sale.admit(9, "t", LONG_TTL).await,
        Reply::Admitted { .. }
    ));
    assert!(sale.unlock(9, "t", "ordered", "123456789012345678").await);
    assert_eq!(
        sale.record(9).await.as_deref(),
        Some("o:123456789012345678")
    );
    assert!(sale.pending().await.is_empty());
    assert_eq!(sale.lock(9).await, None);
    assert_eq!(sale.stock().await, Some(4));
    assert_eq!(
        sale.admit(9, "t2", LONG_TTL).await,
        Reply::AlreadyOrdered("123456789012345678".into())
    );
    assert_eq!(sale.stock().await, Some(4));
}

#[tokio::test]
async fn a_duplicate_in_mysql_records_the_order_and_keeps_the_unit() {
    // MySQL's order for buyer 4 took a unit that Redis had not charged to it; the unit
    // this reservation took stands for it.
    let sale = Sale::live(5).await;
    assert!(matches!(
        sale.admit(4, "t", LONG_TTL).await,
        Reply::Admitted { .. }
    ));
    assert!(sale.unlock(4, "t", "duplicate", "77").await);
    assert_eq!(sale.record(4).await.as_deref(), Some("o:77"));
    assert_eq!(sale.stock().await, Some(4));
    assert!(sale.pending().await.is_empty());
}

#[tokio::test]
async fn sold_out_in_mysql_drops_the_reservation_and_zeroes_redis_stock() {
    let sale = Sale::live(5).await;
    assert!(matches!(
        sale.admit(4, "t", LONG_TTL).await,
        Reply::Admitted { .. }
    ));
    assert!(sale.unlock(4, "t", "sold_out", "").await);
    assert_eq!(sale.record(4).await, None);
    assert_eq!(sale.stock().await, Some(0));
    assert_eq!(sale.admit(5, "t5", LONG_TTL).await, Reply::SoldOut);
}

#[tokio::test]
async fn the_sale_window_follows_redis_time() {
    let sale = Sale::live(5).await;
    let now = sale.now_ms().await;
    sale.load(5, now + 60_000, now + 120_000, &[]).await;
    assert_eq!(sale.admit(1, "t", LONG_TTL).await, Reply::NotStarted);
    sale.load(5, now - 120_000, now - 60_000, &[]).await;
    assert_eq!(sale.admit(1, "t", LONG_TTL).await, Reply::Ended);
    assert_eq!(sale.stock().await, Some(5));
    assert_eq!(sale.record(1).await, None);
}

#[tokio::test]
async fn an_unknown_voucher_is_missing() {
    let sale = Sale {
        conn: redis().await,
        voucher: fresh_voucher_id(),
    };
    assert_eq!(sale.admit(1, "t", LONG_TTL).await, Reply::Missing);
    assert_eq!(sale.record(1).await, None);
}

#[tokio::test]
async fn an_expired_attempt_is_taken_over_by_the_buyers_next_one() {
    let sale = Sale::live(5).await;
    assert!(matches!(
        sale.admit(3, "old", 200).await,
        Reply::Admitted { .. }
    ));
    assert!(matches!(
        sale.admit(3, "new", 200).await,
        Reply::Busy { .. }
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        sale.admit(3, "new", LONG_TTL).await,
        Reply::Admitted { .. }
    ));
    // The takeover reuses the unit: stock went down once.
    assert_eq!(sale.stock().await, Some(4));
    // The old attempt, finishing late, no longer owns anything.
    assert!(!sale.unlock(3, "old", "undo", "").await);
    assert_eq!(sale.stock().await, Some(4));
    assert_eq!(sale.lock(3).await.as_deref(), Some("new"));
}

#[tokio::test]
async fn an_abandoned_unit_is_reclaimed_once_stock_runs_out() {
    let sale = Sale::live(1).await;
    assert!(matches!(
        sale.admit(1, "a", 200).await,
        Reply::Admitted { .. }
    ));
    assert_eq!(sale.admit(2, "b", LONG_TTL).await, Reply::SoldOut);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        sale.admit(2, "b", LONG_TTL).await,
        Reply::Admitted { .. }
    ));
    assert_eq!(sale.stock().await, Some(0));
    assert_eq!(sale.record(1).await.as_deref(), Some("u"));
    assert_eq!(sale.pending().await, vec!["2".to_string()]);
    // The first buyer's late undo must not hand out the unit a second time.
    assert!(!sale.unlock(1, "a", "undo", "").await);
    assert_eq!(sale.stock().await, Some(0));
    // If it did commit after all, MySQL holds the order and Redis records it.
    assert!(!sale.unlock(1, "a", "ordered", "55").await);
    assert_eq!(sale.record(1).await.as_deref(), Some("o:55"));
    assert_eq!(sale.record(2).await.as_deref(), Some("p:b"));
}

#[tokio::test]
async fn load_installs_buyers_and_keeps_reservations_in_flight() {
    let sale = Sale::live(10).await;
    assert!(sale.admit(1, "t", LONG_TTL).await.order_id().is_some());
    assert!(sale.admit(7, "r", LONG_TTL).await.order_id().is_some());
    let now = sale.now_ms().await;
    // Buyer 7's attempt in flight is a repeat: MySQL already holds her order 700.
    sale.load(
        8,
        now - 1000,
        now + 60_000,
        &[(5, "500"), (6, "600"), (7, "700")],
    )
    .await;
    assert_eq!(sale.stock().await, Some(8));
    // Buyer 1's purchase is still on its way to MySQL: it keeps its reservation and lock.
    assert_eq!(sale.record(1).await.as_deref(), Some("p:t"));
    assert_eq!(sale.record(7).await.as_deref(), Some("o:700"));
    assert_eq!(sale.pending().await, vec!["1".to_string()]);
    assert_eq!(
        sale.admit(5, "t", LONG_TTL).await,
        Reply::AlreadyOrdered("500".into())
    );
    assert!(sale.unlock(1, "t", "ordered", "100").await);
}

#[tokio::test]
async fn a_lost_sequence_key_restarts_above_the_numbers_already_used() {
    let sale = Sale::live(10).await;
    let Reply::Admitted {
        seconds,
        sequence: first,
    } = sale.admit(1, "a", LONG_TTL).await
    else {
        panic!("not admitted")
    };
    let Reply::Admitted {
        sequence: second, ..
    } = sale.admit(2, "b", LONG_TTL).await
    else {
        panic!("not admitted")
    };
    // The day's sequence is global: tests running beside this one admit buyers too.
    assert!(second > first, "{second} <= {first}");
    assert!(first < 1 << 32 && second < 1 << 32);
    // As after a Redis restart without persistence: the day's key is gone.
    let day_key = format!("{SEQUENCE_PREFIX}:{}", seconds / 86_400);
    let _: () = sale.conn.clone().del(&day_key).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await;
    let Reply::Admitted {
        sequence: third, ..
    } = sale.admit(3, "c", LONG_TTL).await
    else {
        panic!("not admitted")
    };
    assert!(
        third > second,
        "{third} <= {second}: a restart would reuse order ids"
    );
    let ttl: i64 = sale.conn.clone().ttl(&day_key).await.unwrap();
    assert!(ttl > 86_400);
}

#[tokio::test]
async fn evalsha_needs_the_eval_fallback_after_a_script_flush() {
    // Shows what the component's fallback (src/scripts.rs) is for; the end-to-end tests
    // check the component itself recovers.
    let mut conn = redis().await;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 42")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    let error = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(0)
        .query_async::<i64>(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some("NOSCRIPT"));
}

/// Terms of a sale live for the minute around now.
async fn live_terms(sale: &Sale, stock: i64, initial_stock: i64) -> Terms<'static> {
    let now = sale.now_ms().await;
    Terms {
        stock,
        begin_ms: now - 60_000,
        end_ms: now + 60_000,
        initial_stock,
        title: "voucher",
        description: "",
    }
}

/// A sale of 2 units, one of them ordered by buyer 1 as order 101.
async fn one_of_two_ordered() -> Sale {
    let sale = Sale::live(2).await;
    assert!(sale.admit(1, "t", LONG_TTL).await.order_id().is_some());
    assert!(sale.unlock(1, "t", "ordered", "101").await);
    sale
}

#[tokio::test]
async fn overlapping_syncs_never_forget_a_buyer() {
    let sale = one_of_two_ordered().await;
    let terms = live_terms(&sale, 1, 2).await;
    // Sync a stages buyer 1; an admin's retry (sync b) cannot begin meanwhile.
    assert!(sale.begin_load("a").await.unwrap());
    assert!(sale.stage_buyers("a", &[(1, 101)]).await.unwrap());
    assert!(!sale.begin_load("b").await.unwrap());
    // Sync a stalls past its lease; b begins, stages and finishes.
    sale.expire_sync_lease().await;
    assert!(sale.begin_load("b").await.unwrap());
    assert!(sale.stage_buyers("b", &[(1, 101)]).await.unwrap());
    assert!(sale.finish_load("b", &terms).await.unwrap());
    // Sync a comes back: refused, changing nothing.
    assert!(!sale.stage_buyers("a", &[]).await.unwrap());
    assert!(!sale.finish_load("a", &terms).await.unwrap());
    assert_eq!(sale.record(1).await.as_deref(), Some("o:101"));
    assert_eq!(
        sale.admit(1, "t2", LONG_TTL).await,
        Reply::AlreadyOrdered("101".into())
    );
    assert_eq!(sale.stock().await, Some(1));
}

#[tokio::test]
async fn a_sync_keeps_what_purchases_record_while_it_runs() {
    // Sync a reads MySQL (no orders yet); buyer 2's purchase then commits and settles;
    // sync a finishes: buyer 2's order must still be known.
    let sale = Sale::live(1).await;
    assert!(sale.begin_load("a").await.unwrap());
    assert!(sale.admit(2, "t", LONG_TTL).await.order_id().is_some());
    assert!(sale.stage_buyers("a", &[]).await.unwrap());
    assert!(sale.unlock(2, "t", "ordered", "202").await);
    assert!(sale
        .finish_load("a", &live_terms(&sale, 1, 1).await)
        .await
        .unwrap());
    assert_eq!(
        sale.admit(2, "t2", LONG_TTL).await,
        Reply::AlreadyOrdered("202".into())
    );
}

#[tokio::test]
async fn a_sync_that_lost_its_lease_changes_nothing() {
    // As after a Redis restart in the middle of a sync: the lease is gone.
    let sale = one_of_two_ordered().await;
    assert!(sale.begin_load("a").await.unwrap());
    sale.expire_sync_lease().await;
    assert!(!sale.stage_buyers("a", &[(3, 303)]).await.unwrap());
    assert!(!sale
        .finish_load("a", &live_terms(&sale, 0, 2).await)
        .await
        .unwrap());
    assert_eq!(sale.record(3).await, None);
    assert_eq!(sale.stock().await, Some(1));
}

#[tokio::test]
async fn a_reclaimed_buyer_meeting_no_stock_is_sent_to_mysql_not_told_sold_out() {
    // A's attempt commits in MySQL and dies before settling; B reclaims its unit.
    let sale = Sale::live(1).await;
    assert!(sale.admit(1, "a", 200).await.order_id().is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(sale.admit(2, "b", LONG_TTL).await.order_id().is_some());
    assert_eq!(sale.record(1).await.as_deref(), Some("u"));
    // MySQL had no unit for B: sold out.
    assert!(sale.unlock(2, "b", "sold_out", "").await);
    assert_eq!(sale.stock().await, Some(0));
    // A presses again: only MySQL knows whether she has an order.
    assert_eq!(sale.admit(1, "a2", LONG_TTL).await, Reply::Unsettled);
    // Any other buyer is simply told sold out.
    assert_eq!(sale.admit(3, "c", LONG_TTL).await, Reply::SoldOut);
    // The handler found her order and records it: from now on Redis answers alone.
    assert!(!sale.unlock(1, "", "duplicate", "55").await);
    assert_eq!(
        sale.admit(1, "a3", LONG_TTL).await,
        Reply::AlreadyOrdered("55".into())
    );
    assert_eq!(sale.stock().await, Some(0));
}

#[tokio::test]
async fn a_settlement_after_redis_lost_the_sale_never_passes_for_a_sale() {
    let sale = Sale::live(1).await;
    assert!(sale.admit(1, "a", LONG_TTL).await.order_id().is_some());
    // Redis loses the voucher's state (a restart without persistence).
    sale.lose(&["voucher", "buyers", "pending", "lock:1"]).await;
    let voucher = key(sale.voucher, "voucher");
    // The purchase in flight settles: MySQL was sold out.
    assert!(!sale.unlock(1, "a", "sold_out", "").await);
    assert!(!sale.unlock(1, "a", "undo", "").await);
    let exists: bool = sale.conn.clone().exists(&voucher).await.unwrap();
    assert!(!exists, "a settlement created the voucher's hash");
    // Buyers hear "missing" (503, sync needed), not a script error.
    assert_eq!(sale.admit(2, "b", LONG_TTL).await, Reply::Missing);
    // Nor does a hash missing a field pass for a sale.
    let _: () = sale.conn.clone().hset(&voucher, "stock", 0).await.unwrap();
    assert_eq!(sale.admit(2, "b", LONG_TTL).await, Reply::Missing);
}

#[tokio::test]
async fn admission_throttles_past_the_purchases_in_flight_without_taking_anything() {
    let sale = Sale::live(10).await;
    for user in 1..=3 {
        let admitted = sale
            .try_admit_limited(user, &format!("t{user}"), LONG_TTL, 3)
            .await
            .unwrap();
        assert!(admitted.order_id().is_some(), "{admitted:?}");
    }
    assert_eq!(
        sale.try_admit_limited(4, "t4", LONG_TTL, 3).await.unwrap(),
        Reply::Throttled
    );
    assert_eq!(sale.stock().await, Some(7));
    assert_eq!(sale.record(4).await, None);
    assert_eq!(sale.lock(4).await, None);
    // An expired reservation no longer counts as in flight.
    sale.expire(1).await;
    let admitted = sale.try_admit_limited(4, "t4", LONG_TTL, 3).await.unwrap();
    assert!(admitted.order_id().is_some(), "{admitted:?}");
    // A settled one frees its place too.
    assert!(sale.unlock(2, "t2", "ordered", "202").await);
    let admitted = sale.try_admit_limited(5, "t5", LONG_TTL, 3).await.unwrap();
    assert!(admitted.order_id().is_some(), "{admitted:?}");
    // Sold out is still sold out, throttled or not.
    let sold = Sale::live(1).await;
    assert!(sold.admit(1, "a", LONG_TTL).await.order_id().is_some());
    assert_eq!(
        sold.try_admit_limited(2, "b", LONG_TTL, 1).await.unwrap(),
        Reply::SoldOut
    );
}

#[tokio::test]
async fn the_view_reads_the_sale_state_with_redis_time() {
    let sale = Sale::live(3).await;
    assert!(sale.admit(1, "a", LONG_TTL).await.order_id().is_some());
    let view: Vec<Value> = sale
        .run(VIEW, &[key(sale.voucher, "voucher")], &[])
        .await
        .unwrap();
    let fields: Vec<String> = view[..6]
        .iter()
        .map(|v| redis::from_redis_value(v).unwrap())
        .collect();
    assert_eq!((fields[0].as_str(), fields[3].as_str()), ("2", "3"));
    assert_eq!(fields[4], "voucher");
    let now: i64 = redis::from_redis_value(&view[6]).unwrap();
    assert!((now - sale.now_ms().await).abs() < 1000);
    let unknown: Vec<Value> = sale
        .run(VIEW, &[key(fresh_voucher_id(), "voucher")], &[])
        .await
        .unwrap();
    assert!(unknown.is_empty());
}

#[tokio::test]
async fn two_vouchers_draw_order_ids_from_one_sequence() {
    // The supported set-up (one Redis primary): every voucher's admissions share the
    // day's sequence, so two vouchers admitting in the same second never hand out the
    // same (seconds, sequence). Per-voucher sequences would: both start at 8 × ms + 1.
    let (a, b) = (Sale::live(30).await, Sale::live(30).await);
    let mut ids = HashSet::new();
    for user in 1..=30 {
        for sale in [&a, &b] {
            let id = sale.admit(user, "t", LONG_TTL).await.order_id().unwrap();
            assert!(ids.insert(id), "order id {id} handed out twice");
        }
    }
}
