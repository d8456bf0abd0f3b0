//! More than one unit per buyer (docs/design.md, "Quantities"), against the built
//! component: a sale's `per_buyer`, a press's `quantity` taken whole or not at all, and
//! the sale's promises counted in units.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::json;
use tokio::sync::Semaphore;

use seckill_tests::drivers::app::{buyer_token, Answer, App};
use seckill_tests::drivers::invariants;

use super::order_life::{app, cursor_now, feed};

/// The units a voucher can still hand out, as its page shows them.
async fn remaining(app: &App, voucher: u64) -> u64 {
    let shown = app
        .call(Method::GET, &format!("/vouchers/{voucher}"), None, None)
        .await;
    shown.body["remaining"].as_u64().unwrap()
}

fn refused(answer: &Answer) -> (StatusCode, &str) {
    (answer.status, answer.error())
}

#[tokio::test]
async fn a_buyer_gets_every_unit_she_asks_for_in_one_order_or_none() {
    let app = app().await;
    let start = cursor_now(&app).await;
    let voucher = app
        .create(json!({"stock": 5, "per_buyer": 3}), -60, 3600)
        .await;
    let shown = app
        .call(Method::GET, &format!("/vouchers/{voucher}"), None, None)
        .await;
    assert_eq!(shown.body["per_buyer"], json!(3), "{shown:?}");
    let (first, second, third) = (8_100_001, 8_100_002, 8_100_003);

    // Above the sale's limit, none, or no whole number: 400, and nothing taken.
    let above = app.buy_units(voucher, first, 4).await;
    let too_many = (StatusCode::BAD_REQUEST, "too_many_units");
    assert_eq!(refused(&above), too_many, "{above:?}");
    assert_eq!(above.body["per_buyer"], json!(3), "{above:?}");
    for quantity in [json!(0), json!(-1), json!(2.5), json!("2"), json!(11)] {
        let path = format!("/vouchers/{voucher}/orders");
        let body = json!({ "quantity": quantity });
        let bad = app
            .call(Method::POST, &path, Some(&buyer_token(first)), Some(body))
            .await;
        assert_eq!(
            refused(&bad),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "{quantity}: {bad:?}"
        );
    }
    assert_eq!(remaining(&app, voucher).await, 5);

    // Three units: one order of three.
    let bought = app.buy_units(voucher, first, 3).await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    assert_eq!(bought.body["quantity"], json!(3), "{bought:?}");
    let three = bought.order_id().unwrap();
    assert_eq!(remaining(&app, voucher).await, 2);

    // Three of the two left: 409 naming the two, and nothing taken; two then buy.
    let short = app.buy_units(voucher, second, 3).await;
    let not_enough = (StatusCode::CONFLICT, "not_enough_left");
    assert_eq!(refused(&short), not_enough, "{short:?}");
    assert_eq!(short.body["left"], json!(2), "{short:?}");
    assert_eq!(remaining(&app, voucher).await, 2);
    let bought = app.buy_units(voucher, second, 2).await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    let two = bought.order_id().unwrap();
    assert_eq!(
        refused(&app.buy(voucher, third).await),
        (StatusCode::CONFLICT, "sold_out")
    );

    // One order a buyer, whatever her next press asks for: above the sale's limit too,
    // she hears her order; a quantity that is no whole number from 1 to 10 is still a bad
    // request.
    for quantity in [1, 4] {
        let again = app.buy_units(voucher, first, quantity).await;
        assert_eq!(
            refused(&again),
            (StatusCode::CONFLICT, "already_ordered"),
            "{quantity}: {again:?}"
        );
        assert_eq!(again.body["order_id"], json!(three.to_string()));
    }
    let bad = app.buy_units(voucher, first, 11).await;
    assert_eq!(
        refused(&bad),
        (StatusCode::BAD_REQUEST, "bad_request"),
        "{bad:?}"
    );

    // Her order says its units; cancelling it gives all three back, once.
    let order = app.get_as(&format!("/orders/{three}"), first).await;
    assert_eq!(order.body["quantity"], json!(3), "{order:?}");
    assert_eq!(app.cancel(three, first).await.status, StatusCode::OK);
    assert_eq!(app.cancel(three, first).await.status, StatusCode::OK);
    assert_eq!(remaining(&app, voucher).await, 3);
    let bought = app.buy_units(voucher, third, 3).await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    let last = bought.order_id().unwrap();

    let record = invariants::read(voucher).await;
    record.assert_settled(&[(two, second), (last, third)]);
    assert_eq!((record.live_units(), record.mysql_stock), (5, 0));

    // The feed tells each change with the order's units.
    let (events, _) = feed(&app, &start, 500).await;
    let told: Vec<(String, u64, u64)> = events
        .iter()
        .filter(|event| event["voucher_id"] == json!(voucher))
        .map(|event| {
            (
                event["type"].as_str().unwrap().to_string(),
                event["order_id"].as_str().unwrap().parse().unwrap(),
                event["quantity"].as_u64().unwrap(),
            )
        })
        .collect();
    let expected = [
        ("order.created", three, 3),
        ("order.created", two, 2),
        ("order.cancelled", three, 3),
        ("order.created", last, 3),
    ]
    .map(|(kind, order, units)| (kind.to_string(), order, units));
    assert_eq!(told, expected);
}

/// How a crowd buyer's presses ended: her last answer, the units she asked for then, and
/// the `left` of every `not_enough_left` she heard with what she had asked.
struct Pressed {
    answer: Answer,
    asked: u64,
    short: Vec<(u64, u64)>,
    presses: usize,
}

/// A buyer as a sale page leads her: she asks for `wanted` units, presses again after a
/// `429`, and takes what is left when told fewer are left than she asked for.
async fn press_for(app: &App, voucher: u64, user: u64, wanted: u64) -> Pressed {
    let (mut asked, mut short) = (wanted, Vec::new());
    for presses in 1.. {
        let answer = app.buy_units(voucher, user, asked).await;
        match (answer.status, answer.error()) {
            (StatusCode::CONFLICT, "not_enough_left") => {
                let left = answer.body["left"].as_u64().unwrap();
                short.push((asked, left));
                asked = left;
            }
            (StatusCode::TOO_MANY_REQUESTS, _) => {
                let wait = answer.headers["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                tokio::time::sleep(Duration::from_secs(wait)).await;
            }
            _ => {
                return Pressed {
                    answer,
                    asked,
                    short,
                    presses,
                }
            }
        }
    }
    unreachable!("a buyer presses until she has her answer")
}

/// A crowd of buyers each asking for 1 to 4 units (more than the stock in all), 64 in
/// flight at once, in one bucket and in three: every answer is a `201` of the units she
/// asked for last or a `409`, never a `5xx`; and once it is over, the units sold and the
/// units left are the initial stock in MySQL and in Redis, no buyer holds two orders or
/// more than `per_buyer` units, every `201` is in MySQL whole, and the sale sold out.
#[tokio::test(flavor = "multi_thread")]
async fn a_crowd_buying_one_to_four_units_keeps_every_promise_in_units() {
    let app = Arc::new(App::start().await);
    for (buckets, stock, buyers) in [(1, 157, 120), (3, 211, 160)] {
        let voucher = app
            .create(
                json!({"stock": stock, "per_buyer": 4, "buckets": buckets}),
                -60,
                3600,
            )
            .await;
        let first = 8_200_000 + 1_000 * buckets;
        let gate = Arc::new(Semaphore::new(64));
        let started = Instant::now();
        let crowd: Vec<_> = (0..buyers)
            .map(|i| {
                let (app, gate) = (app.clone(), gate.clone());
                let (user, wanted) = (first + i, 1 + (i * 7) % 4);
                tokio::spawn(async move {
                    let _permit = gate.acquire_owned().await.unwrap();
                    (user, wanted, press_for(&app, voucher, user, wanted).await)
                })
            })
            .collect();
        let mut told = Vec::new();
        let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
        let mut units_told = 0;
        let mut presses = 0;
        let mut asked: HashMap<u64, u64> = HashMap::new();
        for buyer in crowd {
            let (user, wanted, pressed) = buyer.await.unwrap();
            let answer = &pressed.answer;
            presses += pressed.presses;
            *outcomes
                .entry(format!("{} {}", answer.status.as_u16(), answer.error()))
                .or_default() += 1;
            for (asked, left) in &pressed.short {
                assert!(
                    (1..*asked).contains(left),
                    "buyer {user} asked {asked}, told {left} left"
                );
            }
            match answer.status {
                StatusCode::CREATED => {
                    assert_eq!(answer.body["quantity"], json!(pressed.asked), "{answer:?}");
                    assert!(pressed.asked <= wanted);
                    told.push((answer.order_id().unwrap(), user));
                    asked.insert(answer.order_id().unwrap(), pressed.asked);
                    units_told += pressed.asked;
                }
                StatusCode::CONFLICT => {
                    assert_eq!(answer.error(), "sold_out", "buyer {user}: {answer:?}")
                }
                _ => panic!("buyer {user}: {answer:?}"),
            }
        }
        println!(
            "{buckets} bucket(s), {stock} units, {buyers} buyers asking 1 to 4: answered in \
             {:.2} s, {presses} presses, {outcomes:?}",
            started.elapsed().as_secs_f64()
        );
        let record = invariants::read(voucher).await;
        record.assert_settled(&told);
        for (order, units) in &asked {
            assert_eq!(record.quantities[order], *units, "order {order}");
        }
        assert_eq!(
            (record.live_units(), units_told, record.mysql_stock),
            (stock, stock, 0),
            "sold out, to the units each buyer was told"
        );
    }
}
