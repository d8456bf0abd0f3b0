//! The sale's line under real Spin (docs/design.md, "The line"): a buyer told `sold_out`
//! joins it and hears her place; a unit another buyer gives back goes to the first in
//! line, whose next look finds her order committed; a buyer leaves; a sale in buckets has
//! no line.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::json;

use seckill_tests::drivers::app::{buyer_token, Answer, App};
use seckill_tests::drivers::crowd::{fair_shares, Storefront};
use seckill_tests::drivers::invariants;

async fn line(app: &App, method: Method, voucher: u64, user: u64, quantity: u64) -> Answer {
    let body = (method == Method::POST).then(|| json!({ "quantity": quantity }));
    let path = format!("/vouchers/{voucher}/line");
    app.call(method, &path, Some(&buyer_token(user)), body)
        .await
}

async fn look(app: &App, voucher: u64, user: u64) -> Answer {
    line(app, Method::GET, voucher, user, 1).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_buyer_told_sold_out_joins_sees_her_place_and_gets_her_order_when_another_cancels() {
    let app = App::start().await;
    let voucher = app.live_voucher(2).await;
    let (first, second) = (9_100_001, 9_100_002);
    let bought = app.buy(voucher, first).await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    let kept = app.buy(voucher, second).await;
    assert_eq!(kept.status, StatusCode::CREATED, "{kept:?}");
    assert_eq!(app.buy(voucher, 9_100_003).await.error(), "sold_out");

    // Two join in the line's first moments: each hears a place, which the draws of
    // their joins decide.
    let waiting: Vec<u64> = vec![9_100_003, 9_100_004];
    let mut places = BTreeSet::new();
    for (n, user) in waiting.iter().enumerate() {
        let joined = line(&app, Method::POST, voucher, *user, 1).await;
        assert_eq!(joined.status, StatusCode::ACCEPTED, "{joined:?}");
        assert_eq!(joined.body["status"], "waiting");
        assert_eq!(joined.headers["retry-after"], "3");
        assert_eq!(joined.body["line_length"], n as u64 + 1);
        assert_eq!(joined.body["estimate_s"], serde_json::Value::Null);
    }
    for user in &waiting {
        let looked = look(&app, voucher, *user).await;
        assert_eq!(looked.status, StatusCode::OK, "{looked:?}");
        assert_eq!(looked.body["line_length"], 2);
        let position = looked.body["position"].as_u64().unwrap();
        assert_eq!(looked.body["ahead"], position - 1);
        places.insert(position);
    }
    assert_eq!(places, BTreeSet::from([1, 2]));
    let (head, next) = if look(&app, voucher, waiting[0]).await.body["position"] == 1 {
        (waiting[0], waiting[1])
    } else {
        (waiting[1], waiting[0])
    };
    // A press of someone not in line hears sold out: nothing came back.
    assert_eq!(app.buy(voucher, 9_100_009).await.error(), "sold_out");

    // The first buyer cancels: her unit goes to the head of the line, whose look commits
    // the order the line handed her.
    let cancelled = app.cancel(bought.order_id().unwrap(), first).await;
    assert_eq!(cancelled.status, StatusCode::OK, "{cancelled:?}");
    let handed = look(&app, voucher, head).await;
    assert_eq!(handed.status, StatusCode::OK, "{handed:?}");
    assert_eq!(handed.body["status"], "ordered");
    let order_id = handed.body["order_id"].as_str().unwrap().to_string();
    let mine = app
        .get_as(&format!("/vouchers/{voucher}/orders/mine"), head)
        .await;
    assert_eq!(mine.body["order_id"], order_id.as_str(), "{mine:?}");
    // Her next look says the same; the other moved up, and saw one unit come back.
    let again = look(&app, voucher, head).await;
    assert_eq!(
        (again.body["status"].clone(), again.body["order_id"].clone()),
        (json!("ordered"), json!(order_id))
    );
    let moved = look(&app, voucher, next).await;
    assert_eq!(moved.body["position"], 1, "{moved:?}");
    assert_eq!(moved.body["line_length"], 1);
    assert!(moved.body["estimate_s"].as_u64().is_some(), "{moved:?}");
    // A stranger pressing after the unit went hears sold out.
    assert_eq!(app.buy(voucher, 9_100_010).await.error(), "sold_out");

    let record = invariants::read(voucher).await;
    let handed_id: u64 = order_id.parse().unwrap();
    record.assert_settled(&[(kept.order_id().unwrap(), second), (handed_id, head)]);
    assert_eq!((record.live_orders(), record.mysql_stock), (2, 0));
}

/// Units that come back by expiry go to the line as a cancellation's do: the first press
/// after the deadline sweeps, and its hand-out gives them to the line, not to the presser;
/// the handed buyer's order, unpaid in turn, expires and goes on to the next in line.
#[tokio::test(flavor = "multi_thread")]
async fn units_of_expired_orders_go_to_the_line_in_its_order() {
    let app = App::start().await;
    let voucher = app
        .create(json!({"stock": 1, "pay_within_s": 2}), -60, 3600)
        .await;
    assert_eq!(
        app.buy(voucher, 9_400_001).await.status,
        StatusCode::CREATED
    );
    for user in [9_400_002, 9_400_003] {
        let joined = line(&app, Method::POST, voucher, user, 1).await;
        assert_eq!(joined.status, StatusCode::ACCEPTED, "{joined:?}");
    }
    // Their places were drawn (the line's first moments): the first is whoever's is 1.
    let first = look(&app, voucher, 9_400_002).await.body["position"] == 1;
    let order = if first {
        [9_400_002, 9_400_003]
    } else {
        [9_400_003, 9_400_002]
    };
    // A deadline is in whole seconds: 2 s to pay is more than 1 s, so the handed order
    // is not yet due when the look below reads it, and never more than 2 s.
    for (waiting, stranger) in order.into_iter().zip([9_400_010, 9_400_011]) {
        tokio::time::sleep(std::time::Duration::from_millis(2_200)).await;
        let pressed = app.buy(voucher, stranger).await;
        assert_eq!(pressed.error(), "sold_out", "{pressed:?}");
        let handed = look(&app, voucher, waiting).await;
        assert_eq!(handed.body["status"], "ordered", "{handed:?}");
    }
    let record = invariants::read(voucher).await;
    assert_eq!((record.live_orders(), record.mysql_stock), (1, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_buyer_leaves_the_line_and_a_look_from_outside_it_finds_nothing() {
    let app = App::start().await;
    let voucher = app.live_voucher(1).await;
    assert_eq!(
        app.buy(voucher, 9_200_001).await.status,
        StatusCode::CREATED
    );
    let outside = look(&app, voucher, 9_200_002).await;
    assert_eq!(outside.status, StatusCode::OK, "{outside:?}");
    assert_eq!(
        outside.body,
        json!({"status": "not_in_line", "line_length": 0})
    );
    let joined = line(&app, Method::POST, voucher, 9_200_002, 1).await;
    assert_eq!(joined.status, StatusCode::ACCEPTED, "{joined:?}");
    let left = line(&app, Method::DELETE, voucher, 9_200_002, 1).await;
    assert_eq!(left.status, StatusCode::OK, "{left:?}");
    assert_eq!(left.body["status"], "left");
    let again = line(&app, Method::DELETE, voucher, 9_200_002, 1).await;
    assert_eq!(again.body["status"], "not_in_line");
    assert_eq!(
        look(&app, voucher, 9_200_002).await.body["status"],
        "not_in_line"
    );
    // A join with a unit left and nobody in line is a purchase.
    let other = app.live_voucher(1).await;
    let bought = line(&app, Method::POST, other, 9_200_003, 1).await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    assert_eq!(bought.body["status"], "ordered");
    assert!(bought.order_id().is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sale_in_buckets_has_no_line() {
    let app = App::start().await;
    let voucher = app
        .create(json!({"stock": 4, "buckets": 2}), -60, 3600)
        .await;
    let joined = line(&app, Method::POST, voucher, 9_300_001, 1).await;
    assert_eq!(joined.status, StatusCode::CONFLICT, "{joined:?}");
    assert_eq!(joined.error(), "no_line");
}

/// The fairness the line's drawn places are for, measured as the opening draw's is: a sale
/// of 100 units sells out, 150 scripts join the line in the same instant and 850 people
/// over the next 3 s (all within the line's first moments, `LINE_WINDOW_MS`); then every
/// order is cancelled, and the 100 units go to the line. Scripts win in proportion to
/// their numbers, and people joining early and late alike.
#[tokio::test(flavor = "multi_thread")]
async fn scripts_joining_first_and_people_joining_seconds_later_stand_equal_in_line() {
    let app = App::start().await;
    let (stock, bots, people) = (100u64, 150u64, 850u64);
    let voucher = app.live_voucher(stock).await;
    let sellers = 9_600_000;
    let mut sold = Vec::new();
    for user in sellers..sellers + stock {
        let bought = app.buy(voucher, user).await;
        sold.push((bought.order_id().expect("a 201"), user));
    }
    let front = Storefront::new(format!("http://{}", app.addr()));
    let base = 9_700_000;
    let path = format!("/vouchers/{voucher}/line");
    let spread = Duration::from_secs(3);
    for (status, body) in front
        .scripts_then_people(&path, base, (bots, people), spread)
        .await
    {
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    for (order_id, user) in &sold {
        let cancelled = app.cancel(*order_id, *user).await;
        assert_eq!(cancelled.status, StatusCode::OK, "{cancelled:?}");
    }
    let mut winners = Vec::new();
    for i in 0..bots + people {
        let looked = look(&app, voucher, base + i).await;
        if looked.body["status"] == "ordered" {
            winners.push(i);
        }
    }
    assert_eq!(winners.len() as u64, stock);
    let (bots_won, early, late) = fair_shares(&winners, (bots, people));
    println!(
        "line: scripts ({:.0} % of those joining) won {bots_won} of the {stock} units given \
         back; people joining in the first half of the spread won {early}, in its second \
         half {late}",
        100.0 * bots as f64 / (bots + people) as f64
    );
    let record = invariants::read(voucher).await;
    assert_eq!((record.live_orders(), record.mysql_stock), (stock, 0));
    record.assert_redis_agrees();
}
