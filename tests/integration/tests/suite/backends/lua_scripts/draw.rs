//! `lua/admission/draw.lua`: the opening draw (docs/design.md, "The opening draw").

use std::collections::BTreeSet;

use redis::AsyncCommands;
use seckill_core::sale::{Decision, Next};
use seckill_tests::drivers::scripts::Sale;

use super::{assert_admitted, buyer, give_one_back, id_of, ordered};

#[tokio::test]
async fn an_opening_draw_hands_its_units_out_by_place_whatever_the_arrival() {
    let sale = Sale::drawing(2, 400).await;
    // Buyers 1 to 5 enter in that order, at places that rank them 2, 4, 5, 3, 1.
    let places = [(1, 50), (2, 10), (3, 40), (4, 20), (5, 30)];
    for (user, place) in places {
        let entered = sale.press_at(buyer(user), place).await;
        assert!(
            matches!(entered.decision, Decision::InDraw { draw_at_ms, now_ms } if now_ms < draw_at_ms),
            "{entered:?}"
        );
    }
    // Pressing again, even at a better place, changes nothing; nobody holds a unit yet.
    assert!(matches!(
        sale.press_at(buyer(1), 1).await.decision,
        Decision::InDraw { .. }
    ));
    assert_eq!(sale.stock().await, Some(2));
    assert!(sale.queue().await.is_empty());

    tokio::time::sleep(std::time::Duration::from_millis(450)).await;
    // The first press after the window hands the units to the first two places.
    let first = sale.press_at(buyer(1), 1).await;
    assert_eq!(first.decision, Decision::Waitlisted(3), "{first:?}");
    let queued: Vec<u64> = sale.queue().await.iter().map(|e| e.user.raw()).collect();
    assert_eq!(queued, [2, 4]);
    assert_eq!(sale.stock().await, Some(0));
    // No request of theirs waits for those purchases: a winner's first press since is
    // her purchase's (it waits for its commit, as an admitted one), later ones hear it
    // queued.
    for winner in [2, 4] {
        let first = sale.press_at(buyer(winner), 0).await;
        assert!(matches!(first.decision, Decision::Admitted(_)), "{first:?}");
        assert!(matches!(
            sale.press_at(buyer(winner), 0).await.decision,
            Decision::Queued(_)
        ));
    }
    assert_eq!(
        sale.press_at(buyer(3), 0).await.decision,
        Decision::Waitlisted(2)
    );
    // Late comers are no entrants: sold out, and the window stays closed.
    assert_eq!(sale.press_at(buyer(9), 0).await.decision, Decision::SoldOut);

    // A unit given back goes to the first in line, whoever presses next.
    give_one_back(&sale).await;
    assert_eq!(sale.press_at(buyer(9), 0).await.decision, Decision::SoldOut);
    assert_admitted(&sale.press_at(buyer(5), 0).await);
    assert_eq!(
        sale.press_at(buyer(1), 0).await.decision,
        Decision::Waitlisted(2)
    );
}

#[tokio::test]
async fn a_draw_s_winners_hear_their_orders_and_its_batches_wait_for_no_lapse() {
    let sale = Sale::drawing(2, 100).await;
    for (user, place) in [(1, 10), (2, 20)] {
        sale.press_at(buyer(user), place).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    // A late comer's press hands both units out, and drains.
    let late = sale.press_at(buyer(9), 0).await;
    assert_eq!(late.decision, Decision::SoldOut);
    let lease = late.lease.expect("the queue's lease");
    let [one, two] = lease.batch[..] else {
        panic!("two winners queued: {lease:?}")
    };
    // The next purchase is one nobody waits for: the lease is not handed to it, to lapse,
    // but freed for the next press.
    let next = sale
        .publish(&lease.token, None, &[ordered(one)])
        .await
        .unwrap();
    assert_eq!(next, Next::Done);
    let held: Option<String> = sale.conn.clone().get(sale.keys().lease()).await.unwrap();
    assert_eq!(held, None);
    // The winner whose order is committed hears it at her first press, as her own; that
    // press takes the free lease, to commit the rest.
    let won = sale.press_at(buyer(1), 0).await;
    assert_eq!(won.decision, Decision::Won(id_of(one.ticket), 1));
    assert_eq!(won.lease.map(|lease| lease.batch), Some(vec![two]));
    assert_eq!(
        sale.press_at(buyer(1), 0).await.decision,
        Decision::AlreadyOrdered(id_of(one.ticket))
    );
    // The other's first press is her purchase's: it waits for its commit.
    let first = sale.press_at(buyer(2), 0).await;
    assert_eq!(first.decision, Decision::Admitted(two.ticket));
    assert_eq!(first.lease, None);
}

#[tokio::test]
async fn a_draw_with_fewer_entrants_than_units_sells_the_rest_first_come_first_served() {
    let sale = Sale::drawing(3, 200).await;
    sale.press_at(buyer(1), 5).await;
    tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    // The entrant's unit goes out with the first press after the window, and then the
    // rest is anyone's.
    assert_admitted(&sale.press_at(buyer(2), 0).await);
    assert_admitted(&sale.press_at(buyer(1), 0).await);
    assert_admitted(&sale.press_at(buyer(3), 0).await);
    assert_eq!(sale.press_at(buyer(4), 0).await.decision, Decision::SoldOut);
}

#[tokio::test]
async fn presses_racing_after_the_window_hand_each_place_out_once() {
    let sale = Sale::drawing(20, 300).await;
    for user in 1..=60 {
        sale.press_at(buyer(user), user * 7 % 61).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(350)).await;
    // Sixty presses at once, each on a connection of its own, as Spin's requests are.
    let mut presses = Vec::new();
    for user in 1..=60 {
        let sale = sale.another_connection().await;
        presses.push(tokio::spawn(
            async move { sale.press_at(buyer(user), 0).await },
        ));
    }
    let mut waitlisted = BTreeSet::new();
    for press in presses {
        match press.await.unwrap().decision {
            Decision::Queued(_) | Decision::Admitted(_) => {}
            Decision::Waitlisted(place) => assert!(waitlisted.insert(place), "place {place} twice"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(waitlisted, (1..=40).collect(), "every loser her own place");
    let queued: Vec<u64> = sale.queue().await.iter().map(|e| e.user.raw()).collect();
    let mut winners = queued.clone();
    winners.sort_unstable();
    winners.dedup();
    assert_eq!(
        (queued.len(), winners.len()),
        (20, 20),
        "each place handed out once"
    );
    // The first twenty places: the buyers whose place (user * 7 mod 61) is lowest.
    let mut by_place: Vec<u64> = (1..=60).collect();
    by_place.sort_by_key(|user| user * 7 % 61);
    by_place.truncate(20);
    by_place.sort_unstable();
    assert_eq!(winners, by_place);
    assert_eq!(sale.stock().await, Some(0));
}

#[tokio::test]
async fn a_line_redis_lost_leaves_the_units_first_come_first_served() {
    let sale = Sale::drawing(2, 100).await;
    sale.press_at(buyer(1), 5).await;
    sale.press_at(buyer(2), 6).await;
    // Redis loses the line (a failover to a replica that never had it); the sale's terms
    // and its stock are still there.
    sale.lose(&sale.keys().lines()).await;
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    assert_admitted(&sale.press_at(buyer(3), 0).await);
    assert_admitted(&sale.press_at(buyer(1), 0).await);
    assert_eq!(sale.press_at(buyer(2), 0).await.decision, Decision::SoldOut);
}
