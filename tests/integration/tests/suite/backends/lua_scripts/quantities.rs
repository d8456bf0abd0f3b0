//! Purchases of several units: `lua/admission.lua`, `lua/publish.lua`, `lua/restock.lua`
//! and `lua/admission/draw.lua` with each order's units.

use redis::AsyncCommands;
use seckill_core::ledger::{Ledger, ReturnKind, Returned};
use seckill_core::sale::{
    Decision, Limits, Next, ReadFigures, Record, Restock, Route, LINE_HOLD_MS,
};
use seckill_core::verdict::Verdict;
use seckill_tests::drivers::scripts::Sale;

use super::{buyer, entry, id_of, order, ordered, publish_own, ticket, verdict};
use crate::backends::shared::plain;

/// A counter of the voucher's, 0 when it was never counted.
async fn counter(sale: &Sale, name: &str) -> i64 {
    sale.call(&ReadFigures {
        voucher_id: sale.voucher,
    })
    .await
    .unwrap()
    .map_or(0, |figures| figures.counter(name))
}

/// What a press of `user` for `units` units, at the back of any draw's line, is told.
async fn decided(sale: &Sale, user: u64, units: u32) -> Decision {
    sale.press_for(buyer(user), 0, units).await.decision
}

#[tokio::test]
async fn a_press_takes_every_unit_it_asks_for_or_none() {
    let sale = Sale::live_per_buyer(5, 3).await;
    // Above the sale's limit: refused, with nothing taken or counted.
    assert_eq!(
        sale.admit_units(buyer(1), 4).await,
        plain(Decision::TooMany { per_buyer: 3 })
    );
    let three = ticket(&sale.admit_units(buyer(1), 3).await);
    assert_eq!(three.units(), 3);
    assert_eq!(sale.stock().await, Some(2));
    assert_eq!(sale.record(buyer(1)).await, Some(Record::Queued(three)));
    assert_eq!(sale.queue().await, [entry(1, three)]);
    // Three of the two left: how many are left, and nothing taken.
    assert_eq!(
        sale.admit_units(buyer(2), 3).await.decision,
        Decision::Short { left: 2 }
    );
    assert_eq!(
        (sale.stock().await, sale.record(buyer(2)).await),
        (Some(2), None)
    );
    // Her next press hears her purchase with its units, whatever it asks for.
    assert_eq!(
        sale.admit_units(buyer(1), 1).await.decision,
        Decision::Queued(three)
    );
    let two = ticket(&sale.admit_units(buyer(2), 2).await);
    assert_eq!((two.units(), sale.stock().await), (2, Some(0)));
    assert_eq!(
        sale.admit_units(buyer(3), 1).await.decision,
        Decision::SoldOut
    );
    assert_eq!(
        (
            counter(&sale, "purchase:short").await,
            counter(&sale, "purchase:too_many").await,
            counter(&sale, "purchase:admitted").await,
        ),
        (1, 0, 2)
    );
}

#[tokio::test]
async fn a_publication_records_each_order_s_units_and_gives_refused_ones_back_whole() {
    let sale = Sale::live_per_buyer(8, 4).await;
    let own = entry(1, ticket(&sale.admit_units(buyer(1), 4).await));
    let taken = entry(2, ticket(&sale.admit_units(buyer(2), 3).await));
    let held = entry(3, ticket(&sale.admit_units(buyer(3), 1).await));
    assert_eq!(sale.stock().await, Some(0));
    // Hers is committed; his id was taken (his three go back); the third buyer holds an
    // order of two units MySQL has and Redis never charged (one more unit taken).
    let batch = [
        ordered(own),
        verdict(taken, Verdict::IdTaken),
        verdict(held, Verdict::Duplicate(order(900), 2)),
    ];
    assert_eq!(publish_own(&sale, own, &batch).await.unwrap(), Next::Done);
    assert_eq!(
        sale.record(buyer(1)).await,
        Some(Record::Ordered(id_of(own.ticket), 4))
    );
    assert_eq!(sale.record(buyer(2)).await, None);
    assert_eq!(
        sale.record(buyer(3)).await,
        Some(Record::Ordered(order(900), 2))
    );
    assert_eq!(sale.stock().await, Some(3 - 1));
    assert_eq!(counter(&sale, "units:sold").await, 4);
    // A buyer with an order of several units hears its id.
    assert_eq!(
        sale.admit_units(buyer(1), 1).await.decision,
        Decision::AlreadyOrdered(id_of(own.ticket))
    );
}

#[tokio::test]
async fn a_sold_out_verdict_leaves_mysql_s_units_less_those_queued_after_the_batch() {
    for (mysql_left, expected) in [(1, 0), (4, 2)] {
        // Redis hands out ten units; MySQL commits the first purchase's four and refuses
        // the second's, and has `mysql_left` units once the batch committed (one, or
        // four with returns since); the third's two stay queued after the batch.
        let sale = Sale::live_per_buyer(10, 4).await;
        let own = entry(1, ticket(&sale.admit_units(buyer(1), 4).await));
        let refused = entry(2, ticket(&sale.admit_units(buyer(2), 4).await));
        let queued = entry(3, ticket(&sale.admit_units(buyer(3), 2).await));
        let ledger = Ledger {
            orders: 1,
            returned_event: 0,
            stock: mysql_left,
        };
        // MySQL's word on the second: the one left, or none.
        let refused_verdict = match mysql_left {
            1 => Verdict::Short { left: 1 },
            _ => Verdict::SoldOut,
        };
        let batch = [ordered(own), verdict(refused, refused_verdict)];
        sale.publish_counted(&own.to_string(), Some(own), &batch, ledger, Limits::SHIPPED)
            .await
            .unwrap();
        assert_eq!(sale.queue().await, [queued]);
        assert_eq!(
            sale.stock().await,
            Some(expected),
            "MySQL had {mysql_left} left"
        );
    }
}

#[tokio::test]
async fn a_return_gives_back_its_order_s_units_once() {
    let sale = Sale::live_per_buyer(5, 3).await;
    let own = entry(1, ticket(&sale.admit_units(buyer(1), 3).await));
    assert_eq!(
        publish_own(&sale, own, &[ordered(own)]).await.unwrap(),
        Next::Done
    );
    let returned = Returned {
        event: 1,
        kind: ReturnKind::Cancelled {
            order_id: id_of(own.ticket),
            user: buyer(1),
        },
        units: 3,
    };
    for _ in 0..2 {
        let restock = Restock {
            voucher_id: sale.voucher,
            returns: &[returned],
            after: 0,
            swept: None,
        };
        sale.call(&restock).await.unwrap();
        assert_eq!(sale.stock().await, Some(5));
    }
    assert_eq!(
        sale.record(buyer(1)).await,
        Some(Record::Cancelled(id_of(own.ticket)))
    );
    assert_eq!(counter(&sale, "units:returned").await, 3);
}

#[tokio::test]
async fn a_draw_hands_each_entrant_her_whole_quantity_in_place_order() {
    let sale = Sale::drawing_per_buyer(4, 200, 3).await;
    // Places 1, 2 and 3: three units, two, one.
    for (user, place, units) in [(1, 1, 3), (2, 2, 2), (3, 3, 1)] {
        let entered = sale.press_for(buyer(user), place, units).await;
        assert!(
            matches!(entered.decision, Decision::InDraw { .. }),
            "{entered:?}"
        );
    }
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    // The first press after the window hands the first her three; the second's two do
    // not fit the one left, and she keeps her place while the third gets his one.
    assert_eq!(decided(&sale, 9, 1).await, Decision::SoldOut);
    let units = |record: Option<Record>| match record {
        Some(Record::Queued(ticket)) => ticket.units(),
        _ => 0,
    };
    assert_eq!(units(sale.record(buyer(1)).await), 3);
    assert_eq!(units(sale.record(buyer(3)).await), 1);
    assert_eq!(sale.record(buyer(2)).await, None);
    assert_eq!(decided(&sale, 2, 2).await, Decision::Waitlisted(1));
}

#[tokio::test]
async fn units_no_entrant_fits_wait_for_the_first_in_line_then_go_to_anyone() {
    let sale = Sale::drawing_per_buyer(2, 200, 3).await;
    sale.press_for(buyer(1), 1, 3).await;
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    // Her three do not fit the two: they wait for her, in case one comes back.
    let other = sale.press_for(buyer(2), 0, 2).await;
    assert_eq!(other.decision, Decision::SoldOut);
    assert_eq!(decided(&sale, 1, 3).await, Decision::Waitlisted(1));
    // Past her hold, the two are anyone's; she keeps her place.
    let held: String = sale.voucher_get("held_for").await;
    let (user, since) = held.split_once(':').unwrap();
    let since: i64 = since.parse().unwrap();
    let past = format!("{user}:{}", since - LINE_HOLD_MS);
    sale.voucher_set("held_for", past).await;
    let other = sale.press_for(buyer(2), 0, 2).await;
    assert!(matches!(other.decision, Decision::Admitted(_)), "{other:?}");
    assert_eq!(decided(&sale, 1, 3).await, Decision::Waitlisted(1));
}

#[tokio::test]
async fn a_bucket_with_too_few_units_sends_the_buyer_on_and_marks_nothing() {
    let sales = Sale::live_buckets_per_buyer(3, 2, 3).await;
    // The first bucket has two units: a buyer asking three goes on, told how many it
    // has, and it notes no sighting (it is not sold out).
    let sale = &sales[0];
    let first = sale.admit_routed_units(buyer(1), Route::Walk, 3).await;
    assert_eq!(
        (first.decision, first.left, first.seen_out),
        (Decision::BucketOut, 2, Vec::new())
    );
    assert_eq!(sale.stock().await, Some(2));
    let none: Option<i64> = sale
        .conn
        .clone()
        .hget(sale.keys().seen_out(), 0)
        .await
        .unwrap();
    assert_eq!(none, None);
}
