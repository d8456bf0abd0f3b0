//! The sale's line (docs/design.md, "The line"): joining after a sold-out answer, places
//! drawn in the line's first moments and given in order after them, units given back
//! going to the line before anyone, a look that never buys, leaving. The shipped
//! admission and leave scripts on the real Redis, as the component calls them.

use seckill_core::sale::{Decision, Leave, LineAsk, LINE_HOLD_MS, LINE_WINDOW_MS};
use seckill_core::UserId;
use seckill_tests::drivers::scripts::Sale;

fn buyer(raw: u64) -> UserId {
    UserId::from_raw(raw)
}

/// The buyers whose purchases are queued, oldest first.
async fn queued(sale: &Sale) -> Vec<u64> {
    sale.queue().await.iter().map(|e| e.user.raw()).collect()
}

/// `user` joins for `units` at `place` (if her join draws one): her place in line.
async fn join(sale: &Sale, user: u64, place: u64, units: u32) -> u64 {
    let joined = sale
        .ask_line(buyer(user), LineAsk::Join, place, units)
        .await;
    match joined.decision {
        Decision::Waitlisted(position) => position,
        other => panic!("{user} joined: {other:?}"),
    }
}

async fn look(sale: &Sale, user: u64) -> Decision {
    sale.ask_line(buyer(user), LineAsk::Look, 0, 1)
        .await
        .decision
}

/// Sells the whole stock of `sale`, a unit each, to buyers from 1.
async fn sell_out(sale: &Sale, stock: u64) {
    for user in 1..=stock {
        let admitted = sale.admit(buyer(user)).await;
        assert!(
            matches!(admitted.decision, Decision::Admitted(_)),
            "{admitted:?}"
        );
    }
    assert_eq!(sale.stock().await, Some(0));
}

#[tokio::test]
async fn joins_in_the_first_moments_stand_equal_and_a_unit_given_back_goes_to_the_first() {
    let sale = Sale::live(2).await;
    sell_out(&sale, 2).await;
    // The bot joins first, the person a moment later: the places their joins drew decide.
    assert_eq!(join(&sale, 10, 900, 1).await, 1);
    assert_eq!(join(&sale, 11, 100, 1).await, 1);
    assert_eq!(look(&sale, 10).await, Decision::Waitlisted(2));
    // Joining again keeps her place.
    assert_eq!(join(&sale, 10, 1, 1).await, 2);
    let waiting = sale.ask_line(buyer(10), LineAsk::Look, 0, 1).await;
    assert_eq!(waiting.line.length, 2);

    sale.give_back_cancelled(1, 1).await;
    // A stranger's press after it hands the unit to the line's first, and hears sold out.
    assert_eq!(sale.admit(buyer(50)).await.decision, Decision::SoldOut);
    assert_eq!(queued(&sale).await, [1, 2, 11]);
    assert_eq!(sale.stock().await, Some(0));
    // Her look finds the purchase the line queued for her; the other moved up.
    assert!(matches!(look(&sale, 11).await, Decision::Admitted(_)));
    assert_eq!(look(&sale, 10).await, Decision::Waitlisted(1));
    let figures = sale.ask_line(buyer(10), LineAsk::Look, 0, 1).await.line;
    assert_eq!((figures.length, figures.returned), (1, 1));
}

#[tokio::test]
async fn later_joins_go_to_the_back_in_the_order_they_came() {
    let sale = Sale::live(1).await;
    sell_out(&sale, 1).await;
    assert_eq!(join(&sale, 10, 5, 1).await, 1);
    // The line opened longer ago than its window: places no longer drawn.
    let opened = sale.voucher_field("line_from").await.unwrap();
    sale.voucher_set("line_from", opened - LINE_WINDOW_MS - 1)
        .await;
    assert_eq!(join(&sale, 20, 1, 1).await, 2);
    assert_eq!(join(&sale, 21, 0, 1).await, 3);
    assert_eq!(join(&sale, 22, 2, 1).await, 4);
    sale.give_back_cancelled(1, 1).await;
    assert_eq!(sale.admit(buyer(50)).await.decision, Decision::SoldOut);
    sale.give_back_cancelled(2, 1).await;
    assert_eq!(sale.admit(buyer(51)).await.decision, Decision::SoldOut);
    assert_eq!(queued(&sale).await, [1, 10, 20]);
    assert_eq!(look(&sale, 22).await, Decision::Waitlisted(2));
}

#[tokio::test]
async fn a_look_never_buys_and_a_join_with_units_left_and_no_line_buys() {
    let sale = Sale::live(2).await;
    assert_eq!(look(&sale, 10).await, Decision::NotInLine);
    assert_eq!(sale.stock().await, Some(2));
    let joined = sale.ask_line(buyer(10), LineAsk::Join, 7, 1).await;
    assert!(
        matches!(joined.decision, Decision::Admitted(_)),
        "{joined:?}"
    );
    assert_eq!(sale.stock().await, Some(1));
    // Her look finds her purchase, as a press would.
    assert!(matches!(look(&sale, 10).await, Decision::Queued(_)));
}

#[tokio::test]
async fn a_buyer_who_leaves_is_out_and_the_next_takes_her_turn() {
    let sale = Sale::live(1).await;
    sell_out(&sale, 1).await;
    join(&sale, 10, 1, 1).await;
    join(&sale, 11, 2, 1).await;
    let leave = |user| Leave {
        sale: sale.sale(),
        user: buyer(user),
    };
    assert!(sale.call(&leave(10)).await.unwrap());
    assert!(!sale.call(&leave(10)).await.unwrap());
    assert_eq!(look(&sale, 10).await, Decision::NotInLine);
    sale.give_back_cancelled(1, 1).await;
    assert_eq!(sale.admit(buyer(50)).await.decision, Decision::SoldOut);
    assert_eq!(queued(&sale).await, [1, 11]);
}

/// A sold-out sale whose line's first, buyer 10, asks for three units and was passed over
/// once: the one unit given back went to buyer 11, behind her, asking one.
async fn first_in_line_passed_over() -> Sale {
    let sale = Sale::live_per_buyer(2, 3).await;
    sell_out(&sale, 2).await;
    assert_eq!(join(&sale, 10, 1, 3).await, 1);
    assert_eq!(join(&sale, 11, 2, 1).await, 2);
    sale.give_back_cancelled(1, 1).await;
    assert_eq!(sale.admit(buyer(50)).await.decision, Decision::SoldOut);
    assert_eq!(queued(&sale).await, [1, 2, 11]);
    sale
}

#[tokio::test]
async fn the_first_in_line_is_passed_over_once_then_the_units_wait_for_her() {
    let sale = first_in_line_passed_over().await;
    // Passed over once, she has the units that come back next, however few at a time:
    // nobody, in line or not, takes them meanwhile.
    for (event, stranger) in [(2, 51), (3, 52)] {
        sale.give_back_cancelled(event, 1).await;
        assert_eq!(
            sale.admit(buyer(stranger)).await.decision,
            Decision::SoldOut
        );
        assert_eq!(look(&sale, 10).await, Decision::Waitlisted(1));
    }
    sale.give_back_cancelled(4, 1).await;
    assert!(matches!(look(&sale, 10).await, Decision::Admitted(_)));
    assert_eq!(queued(&sale).await, [1, 2, 11, 10]);
    // With nobody in line, a unit back is anyone's.
    sale.give_back_cancelled(5, 1).await;
    assert!(matches!(
        sale.admit(buyer(53)).await.decision,
        Decision::Admitted(_)
    ));
}

#[tokio::test]
async fn a_sale_in_buckets_has_no_line_and_an_ended_sale_takes_no_join() {
    let buckets = Sale::live_buckets(4, 2).await;
    let decided = buckets[0]
        .ask_line(buyer(10), LineAsk::Join, 1, 1)
        .await
        .decision;
    assert_eq!(decided, Decision::NoLine);
    let sale = Sale::live(1).await;
    sell_out(&sale, 1).await;
    let now = sale.now_ms().await;
    sale.voucher_set("end_ms", now - 1).await;
    let joined = sale.ask_line(buyer(10), LineAsk::Join, 1, 1).await;
    assert_eq!(joined.decision, Decision::Ended);
}

#[tokio::test]
async fn a_join_keeps_her_place_and_quantity_even_where_the_sale_lost_its_line_s_opening() {
    let sale = Sale::live_per_buyer(1, 2).await;
    sell_out(&sale, 1).await;
    assert_eq!(join(&sale, 10, 5, 1).await, 1);
    assert_eq!(join(&sale, 11, 9, 2).await, 2);
    // Part of the sale's hash lost: the line is no longer known open, its buyers still in it.
    sale.voucher_del("line_from").await;
    assert_eq!(join(&sale, 10, 1, 2).await, 1);
    assert_eq!(
        sale.ask_line(buyer(10), LineAsk::Join, 1, 2)
            .await
            .line
            .length,
        2
    );
    sale.give_back_cancelled(1, 1).await;
    assert_eq!(sale.admit(buyer(50)).await.decision, Decision::SoldOut);
    assert_eq!(queued(&sale).await, [1, 10]);
}

#[tokio::test]
async fn units_wait_for_the_first_in_line_no_longer_than_her_hold() {
    let sale = first_in_line_passed_over().await;
    sale.give_back_cancelled(2, 1).await;
    assert_eq!(sale.admit(buyer(51)).await.decision, Decision::SoldOut);
    // Her hold began as the first unit went past her; once it is over, the unit waiting
    // is anyone's (nobody else in line), and she keeps her place.
    let held: String = sale.voucher_get("held_for").await;
    let since: i64 = held.strip_prefix("10:").unwrap().parse().unwrap();
    sale.voucher_set("held_for", format!("10:{}", since - LINE_HOLD_MS))
        .await;
    assert!(matches!(
        sale.admit(buyer(52)).await.decision,
        Decision::Admitted(_)
    ));
    assert_eq!(look(&sale, 10).await, Decision::Waitlisted(1));
    assert_eq!(queued(&sale).await, [1, 2, 11, 52]);
}

#[tokio::test]
async fn a_look_of_a_buyer_not_in_line_that_takes_the_sweep_sweeps() {
    let sale = Sale::live(1).await;
    sell_out(&sale, 1).await;
    join(&sale, 10, 1, 1).await;
    sale.make_sweep_due().await;
    // A stranger's look finds the expiries due: the sweep is hers, or still free for the
    // next press; never taken by a request that does not run it.
    let looked = sale.ask_line(buyer(50), LineAsk::Look, 0, 1).await;
    assert_eq!(looked.decision, Decision::NotInLine);
    let pressed = sale.admit(buyer(51)).await;
    assert!(
        looked.sweep || pressed.sweep,
        "nobody sweeps: {looked:?} then {pressed:?}"
    );
}

#[tokio::test]
async fn a_look_of_a_buyer_not_in_line_that_hands_units_out_drains_them() {
    let sale = Sale::live(1).await;
    sell_out(&sale, 1).await;
    join(&sale, 10, 1, 1).await;
    // The drainer that held the lease is gone.
    sale.expire_lease().await;
    sale.give_back_cancelled(1, 1).await;
    // Her look hands the unit to the first in line and, the lease free, commits it: the
    // handed buyer who never comes back has it committed by any look or press.
    let looked = sale.ask_line(buyer(50), LineAsk::Look, 0, 1).await;
    assert_eq!(looked.decision, Decision::NotInLine);
    assert_eq!(looked.line.length, 0);
    let lease = looked
        .lease
        .expect("the look drains the purchase it queued");
    assert!(lease.batch.iter().any(|entry| entry.user == buyer(10)));
}
