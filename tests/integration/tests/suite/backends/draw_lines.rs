//! The opening draw's line with quantities (docs/design.md, "The opening draw"), and what
//! a buyer asking for more than the sale allows hears (docs/design.md, "Quantities"): the
//! shipped admission script on the real Redis, as the component calls it.

use std::time::Duration;

use seckill_core::sale::{Decision, Published};
use seckill_core::verdict::Verdict;
use seckill_core::UserId;
use seckill_tests::drivers::scripts::{entry, Sale};

fn buyer(raw: u64) -> UserId {
    UserId::from_raw(raw)
}

/// The buyers whose purchases are queued, oldest first.
async fn queued(sale: &Sale) -> Vec<u64> {
    sale.queue().await.iter().map(|e| e.user.raw()).collect()
}

/// Enters `entrants` (buyer, place, units) in the draw of `sale`, whose window is open.
async fn enter(sale: &Sale, entrants: impl IntoIterator<Item = (u64, u64, u32)>) {
    for (user, place, units) in entrants {
        let entered = sale.press_for(buyer(user), place, units).await;
        assert!(
            matches!(entered.decision, Decision::InDraw { .. }),
            "{user}: {entered:?}"
        );
    }
}

#[tokio::test]
async fn a_unit_the_head_of_the_line_does_not_fit_goes_to_the_first_place_it_fits_however_far() {
    let sale = Sale::drawing_per_buyer(5, 1_500, 2).await;
    // Places 1 and 2 ask for two units, the next 1,100 for two as well, the last three for
    // one: the fifth unit is theirs, 1,100 places behind the head.
    let asking = |user: u64| if user > 1_102 { 1 } else { 2 };
    enter(&sale, (1..=1_105).map(|user| (user, user, asking(user)))).await;
    let window = sale.voucher_field("draw_ms").await.unwrap();
    let left = sale.voucher_field("begin_ms").await.unwrap() + window - sale.now_ms().await;
    tokio::time::sleep(Duration::from_millis(left.max(0) as u64 + 20)).await;

    // The first press after the window hands out the whole stock, in place order among
    // those who fit; the late comer hears sold out.
    assert_eq!(
        sale.press_for(buyer(50_000), 0, 1).await.decision,
        Decision::SoldOut
    );
    assert_eq!(queued(&sale).await, [1, 2, 1_103]);
    assert_eq!(sale.stock().await, Some(0));
    // The others hear their place in line: every entrant still ahead of them, whatever
    // she asked for.
    assert_eq!(
        sale.press_for(buyer(3), 0, 2).await.decision,
        Decision::Waitlisted(1)
    );
    assert_eq!(
        sale.press_for(buyer(1_104), 0, 1).await.decision,
        Decision::Waitlisted(1_101)
    );
    // The head asking two was passed over once: a unit given back now waits for her,
    // and nobody, in line or not, takes it meanwhile.
    sale.give_back_cancelled(1, 1).await;
    assert_eq!(
        sale.press_for(buyer(50_001), 0, 1).await.decision,
        Decision::SoldOut
    );
    assert_eq!(
        sale.press_for(buyer(1_104), 0, 1).await.decision,
        Decision::Waitlisted(1_101)
    );
    assert_eq!(queued(&sale).await, [1, 2, 1_103]);
    // One more: the two are hers; the next in line asks two as well, and the third unit
    // goes past him to the first who fits it.
    sale.give_back_cancelled(2, 2).await;
    assert!(matches!(
        sale.press_for(buyer(3), 0, 2).await.decision,
        Decision::Admitted(_)
    ));
    assert_eq!(queued(&sale).await, [1, 2, 1_103, 3, 1_104]);
    assert_eq!(sale.stock().await, Some(0));
}

#[tokio::test]
async fn units_no_entrant_fits_wait_for_the_first_in_line() {
    let sale = Sale::drawing_per_buyer(3, 300, 3).await;
    // A asks for two, B for three, C for one.
    enter(&sale, [(1, 10, 2), (2, 20, 3), (3, 30, 1)]).await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        sale.press_for(buyer(9), 0, 1).await.decision,
        Decision::SoldOut
    );
    assert_eq!(queued(&sale).await, [1, 3]);
    // Units back one at a time: B, first in line, asks for three; they wait for her,
    // nobody else takes them, and she hears her place meanwhile.
    for event in 1..=2 {
        sale.give_back_cancelled(event, 1).await;
        assert_eq!(
            sale.press_for(buyer(2), 0, 3).await.decision,
            Decision::Waitlisted(1)
        );
        assert_eq!(
            sale.press_for(buyer(9), 0, 1).await.decision,
            Decision::SoldOut
        );
    }
    sale.give_back_cancelled(3, 1).await;
    assert!(matches!(
        sale.press_for(buyer(2), 0, 3).await.decision,
        Decision::Admitted(_)
    ));
    assert_eq!(queued(&sale).await, [1, 3, 2]);
    // With nobody in line, a unit back is anyone's.
    sale.give_back_cancelled(4, 1).await;
    assert!(matches!(
        sale.press_for(buyer(9), 0, 1).await.decision,
        Decision::Admitted(_)
    ));
}

#[tokio::test]
async fn a_buyer_holding_an_order_hears_it_whatever_quantity_she_asks() {
    let sale = Sale::live_per_buyer(5, 2).await;
    let admitted = sale.admit_units(buyer(1), 2).await;
    let Decision::Admitted(ticket) = admitted.decision else {
        panic!("{admitted:?}")
    };
    // Queued, then committed: she hears her purchase, not the sale's limit.
    assert_eq!(
        sale.admit_units(buyer(1), 3).await.decision,
        Decision::Queued(ticket)
    );
    let mine = entry(buyer(1), &admitted);
    let id = ticket.order_id().unwrap();
    let published: Published = (mine, id, Verdict::Ordered);
    let token = admitted.lease.expect("the lease").token;
    sale.publish(&token, None, &[published]).await.unwrap();
    assert_eq!(
        sale.admit_units(buyer(1), 3).await.decision,
        Decision::AlreadyOrdered(id)
    );
    // A buyer without an order asking for more than the sale allows hears its limit, and
    // nothing is decided.
    assert_eq!(
        sale.admit_units(buyer(2), 3).await.decision,
        Decision::TooMany { per_buyer: 2 }
    );
    assert_eq!(sale.stock().await, Some(3));
}
