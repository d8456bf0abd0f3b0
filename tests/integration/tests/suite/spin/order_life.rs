//! The order's life after the `201`, under real Spin: paying, cancelling, orders that
//! expire unpaid and give their unit back to the live sale with no scheduler, the order
//! feed, and the merchant ending a sale.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::task::JoinSet;

use seckill_core::sale::Keys;
use seckill_core::BucketId;

use seckill_tests::drivers::app::{buyer_token, Answer, App, ADMIN_TOKEN};
use seckill_tests::drivers::invariants;
use seckill_tests::servers::faults::Manifest;
use seckill_tests::servers::local;

const PAYMENTS_TOKEN: &str = "integration-test-payments-token";
const FEED_TOKEN: &str = "integration-test-feed-token";

pub(super) async fn app() -> App {
    let manifest = Manifest::with_absolute_paths();
    App::start_with(
        manifest.path(),
        vec![
            ("SPIN_VARIABLE_PAYMENTS_TOKEN".into(), PAYMENTS_TOKEN.into()),
            ("SPIN_VARIABLE_FEED_TOKEN".into(), FEED_TOKEN.into()),
        ],
    )
    .await
}

/// A live voucher whose winners have `pay_within_s` to pay.
async fn voucher(app: &App, stock: u64, pay_within_s: u64) -> u64 {
    let terms = json!({"title": "order life", "stock": stock, "pay_within_s": pay_within_s});
    let created = app.created(terms, -60, 3600).await;
    assert_eq!(created["pay_within_s"], pay_within_s);
    created["id"].as_u64().unwrap()
}

async fn post(app: &App, path: &str, token: &str) -> Answer {
    app.post(path, token).await
}

fn order_of(answer: &Answer) -> u64 {
    assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
    answer.order_id().unwrap()
}

fn assert_status(answer: &Answer, status: StatusCode, code: &str) {
    assert_eq!(
        (answer.status, answer.error()),
        (status, code),
        "{answer:?}"
    );
}

/// The feed's events from `after` to its end, read `limit` at a time.
pub(super) async fn feed(app: &App, after: &str, limit: u32) -> (Vec<Value>, String) {
    let mut events = Vec::new();
    let mut cursor = after.to_string();
    loop {
        let page = app
            .get(&format!("/events?after={cursor}&limit={limit}"), FEED_TOKEN)
            .await;
        assert_eq!(page.status, StatusCode::OK, "{page:?}");
        let got = page.body["events"].as_array().unwrap().clone();
        cursor = page.body["next"].as_str().unwrap().to_string();
        let done = got.len() < limit as usize;
        events.extend(got);
        if done {
            return (events, cursor);
        }
    }
}

pub(super) async fn cursor_now(app: &App) -> String {
    feed(app, "0", 1000).await.1
}

#[tokio::test]
async fn an_order_is_paid_or_cancelled_once_and_a_cancelled_unit_is_sold_again() {
    let app = app().await;
    let start = cursor_now(&app).await;
    let voucher = voucher(&app, 2, 600).await;
    let (payer, canceller, stranger, latecomer) = (7101, 7102, 7103, 7104);
    let paid = order_of(&app.buy(voucher, payer).await);
    let cancelled = order_of(&app.buy(voucher, canceller).await);
    let late = app.buy(voucher, latecomer).await;
    assert_status(&late, StatusCode::CONFLICT, "sold_out");

    // Pay: by the payment system's token (a buyer's is refused), twice, answering the
    // same order.
    let pay = format!("/orders/{paid}/pay");
    let by_buyer = post(&app, &pay, &buyer_token(payer)).await;
    assert_status(&by_buyer, StatusCode::FORBIDDEN, "forbidden");
    let once = post(&app, &pay, PAYMENTS_TOKEN).await;
    assert_eq!(once.status, StatusCode::OK, "{once:?}");
    assert_eq!(once.body["status"], "paid");
    let twice = post(&app, &pay, ADMIN_TOKEN).await;
    assert_eq!((twice.status, &twice.body), (StatusCode::OK, &once.body));
    let cancel_paid = post(&app, &format!("/orders/{paid}/cancel"), &buyer_token(payer)).await;
    assert_status(&cancel_paid, StatusCode::CONFLICT, "order_paid");

    // Cancel: someone else's order is not found; its buyer's is cancelled, once.
    let cancel = format!("/orders/{cancelled}/cancel");
    let by_stranger = post(&app, &cancel, &buyer_token(stranger)).await;
    assert_status(&by_stranger, StatusCode::NOT_FOUND, "not_found");
    let once = post(&app, &cancel, &buyer_token(canceller)).await;
    assert_eq!(once.status, StatusCode::OK, "{once:?}");
    assert_eq!(once.body["status"], "cancelled");
    let twice = post(&app, &cancel, ADMIN_TOKEN).await;
    assert_eq!((twice.status, &twice.body), (StatusCode::OK, &once.body));
    let pay_cancelled = post(&app, &format!("/orders/{cancelled}/pay"), PAYMENTS_TOKEN).await;
    assert_status(&pay_cancelled, StatusCode::CONFLICT, "order_cancelled");
    let made_up = post(&app, "/orders/12345/pay", PAYMENTS_TOKEN).await;
    assert_status(&made_up, StatusCode::NOT_FOUND, "not_found");

    // She still finds her order, cancelled.
    let mine = app
        .get_as(&format!("/vouchers/{voucher}/orders/mine"), canceller)
        .await;
    assert_eq!((mine.status, &mine.body), (StatusCode::OK, &once.body));

    // Her unit is back in the sale, for someone else: she may not buy again.
    let again = app.buy(voucher, canceller).await;
    assert_status(&again, StatusCode::CONFLICT, "order_cancelled");
    assert_eq!(again.order_id(), Some(cancelled));
    let resold = order_of(&app.buy(voucher, latecomer).await);
    let sold_again = app.buy(voucher, stranger).await;
    assert_status(&sold_again, StatusCode::CONFLICT, "sold_out");
    let record = invariants::read(voucher).await;
    record.assert_settled(&[]);
    assert_eq!((record.mysql_stock, record.orders.len()), (0, 3));

    // The counters tell the same.
    let metrics = app.get("/metrics", ADMIN_TOKEN).await;
    let text = metrics.body.as_str().unwrap();
    for line in [
        format!("seckill_order_changes_total{{voucher_id=\"{voucher}\",outcome=\"paid\"}} 1"),
        format!("seckill_order_changes_total{{voucher_id=\"{voucher}\",outcome=\"cancelled\"}} 1"),
        format!("seckill_units_returned_total{{voucher_id=\"{voucher}\"}} 1"),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }

    // The feed tells each change once, in order.
    let (events, _) = feed(&app, &start, 2).await;
    let mine: Vec<(String, String)> = events
        .iter()
        .filter(|event| event["voucher_id"] == voucher)
        .map(|event| {
            (
                event["type"].as_str().unwrap().to_string(),
                event["order_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected = [
        ("order.created", paid),
        ("order.created", cancelled),
        ("order.paid", paid),
        ("order.cancelled", cancelled),
        ("order.created", resold),
    ]
    .map(|(kind, order)| (kind.to_string(), order.to_string()));
    assert_eq!(mine, expected);
    let ids: Vec<u64> = events
        .iter()
        .map(|event| event["id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "{ids:?}");
}

#[tokio::test]
async fn an_unpaid_order_expires_and_its_unit_is_sold_again_with_no_operator() {
    let app = app().await;
    let voucher = voucher(&app, 1, 2).await;
    let (winner, waiting, latecomer) = (7201, 7202, 7203);
    let expiring = order_of(&app.buy(voucher, winner).await);
    assert_status(
        &app.buy(voucher, waiting).await,
        StatusCode::CONFLICT,
        "sold_out",
    );
    tokio::time::sleep(Duration::from_millis(3_000)).await;

    // The first press after the deadline expires her order and buys the unit.
    let resold = order_of(&app.buy(voucher, latecomer).await);
    let again = app.buy(voucher, winner).await;
    assert_status(&again, StatusCode::CONFLICT, "order_expired");
    assert_eq!(again.order_id(), Some(expiring));
    let order = app.get(&format!("/orders/{expiring}"), ADMIN_TOKEN).await;
    assert_eq!(order.body["status"], "expired");
    assert_status(
        &post(&app, &format!("/orders/{expiring}/pay"), PAYMENTS_TOKEN).await,
        StatusCode::CONFLICT,
        "order_expired",
    );
    assert_ne!(resold, expiring);
    let record = invariants::read(voucher).await;
    record.assert_settled(&[]);
    assert_eq!(record.statuses, HashMap::from([(expiring, 7), (resold, 1)]));
}

#[tokio::test]
async fn ending_a_sale_stops_new_buyers_and_keeps_the_winners_ids() {
    let app = app().await;
    let voucher = voucher(&app, 5, 900).await;
    let winner = order_of(&app.buy(voucher, 7301).await);
    let ended = post(&app, &format!("/vouchers/{voucher}/end"), ADMIN_TOKEN).await;
    assert_eq!(ended.status, StatusCode::OK, "{ended:?}");
    assert_eq!(ended.body["status"], "ended");
    assert_status(&app.buy(voucher, 7302).await, StatusCode::CONFLICT, "ended");
    let again = app.buy(voucher, 7301).await;
    assert_status(&again, StatusCode::CONFLICT, "already_ordered");
    assert_eq!(again.order_id(), Some(winner));
    let shown = app
        .call(Method::GET, &format!("/vouchers/{voucher}"), None, None)
        .await;
    assert_eq!(shown.body["status"], "ended");
    assert_status(
        &post(&app, &format!("/vouchers/{voucher}/end"), &buyer_token(1)).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
}

#[tokio::test]
async fn a_sync_after_redis_lost_the_sale_keeps_returned_units_once() {
    let app = app().await;
    let voucher = voucher(&app, 2, 900).await;
    let (cancelling, keeping, newcomer, late) = (7401, 7402, 7403, 7404);
    let cancelled = order_of(&app.buy(voucher, cancelling).await);
    order_of(&app.buy(voucher, keeping).await);
    let cancel = post(
        &app,
        &format!("/orders/{cancelled}/cancel"),
        &buyer_token(cancelling),
    )
    .await;
    assert_eq!(cancel.status, StatusCode::OK, "{cancel:?}");

    // Redis loses the sale; the admin's sync rebuilds it from MySQL.
    let keys = seckill_core::sale::Keys::new(seckill_core::BucketId::from_raw(voucher));
    let _: () = redis::AsyncCommands::del(
        &mut seckill_tests::servers::local::redis().await,
        &[keys.voucher(), keys.buyers()],
    )
    .await
    .unwrap();
    let synced = post(&app, &format!("/vouchers/{voucher}/sync"), ADMIN_TOKEN).await;
    assert_eq!(synced.status, StatusCode::OK, "{synced:?}");
    assert_eq!(synced.body["remaining"], 1);
    // A sweep applies no return twice.
    let swept = post(&app, &format!("/vouchers/{voucher}/expire"), ADMIN_TOKEN).await;
    assert_eq!(swept.body["units_returned"], 0, "{swept:?}");

    let again = app.buy(voucher, cancelling).await;
    assert_status(&again, StatusCode::CONFLICT, "order_cancelled");
    assert_eq!(again.order_id(), Some(cancelled));
    order_of(&app.buy(voucher, newcomer).await);
    assert_status(
        &app.buy(voucher, late).await,
        StatusCode::CONFLICT,
        "sold_out",
    );
    let record = invariants::read(voucher).await;
    record.assert_settled(&[]);
}

#[tokio::test]
async fn the_merchant_pages_through_vouchers_and_a_sale_s_orders() {
    let app = app().await;
    let older = voucher(&app, 3, 900).await;
    let newer = voucher(&app, 3, 900).await;
    let mut bought = Vec::new();
    for buyer in [7501, 7502, 7503] {
        bought.push(order_of(&app.buy(newer, buyer).await));
    }
    bought.sort_unstable();

    // Vouchers: newest first, two at a time, from the newest.
    let first = app.get("/vouchers?limit=1", ADMIN_TOKEN).await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    let listed = first.body["vouchers"].as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0]["id"].as_u64().unwrap() >= newer);
    // The next page goes on below it, newest first; other tests of the suite may create
    // vouchers between the two.
    let after_newer = app
        .get(&format!("/vouchers?after={newer}&limit=50"), ADMIN_TOKEN)
        .await;
    let below: Vec<&Value> = after_newer.body["vouchers"]
        .as_array()
        .unwrap()
        .iter()
        .take_while(|v| v["id"].as_u64().unwrap() >= older)
        .collect();
    let ids: Vec<u64> = below.iter().map(|v| v["id"].as_u64().unwrap()).collect();
    assert!(
        ids.windows(2).all(|w| w[0] > w[1]) && ids[0] < newer,
        "{ids:?}"
    );
    assert_eq!(below.last().unwrap()["id"], older);
    assert_eq!(below.last().unwrap()["remaining"], 3);

    // A sale's orders in id order, with their statuses, page by page.
    let mut seen = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let page = app
            .get(
                &format!("/vouchers/{newer}/orders?after={cursor}&limit=2"),
                ADMIN_TOKEN,
            )
            .await;
        assert_eq!(page.status, StatusCode::OK, "{page:?}");
        for order in page.body["orders"].as_array().unwrap() {
            assert_eq!(order["status"], "unpaid");
            seen.push(order["order_id"].as_str().unwrap().parse::<u64>().unwrap());
        }
        match page.body["next"].as_str() {
            Some(next) => cursor = next.to_string(),
            None => break,
        }
    }
    assert_eq!(seen, bought);
    let buyer = app.get_as(&format!("/vouchers/{newer}/orders"), 7501).await;
    assert_status(&buyer, StatusCode::FORBIDDEN, "forbidden");
}

/// The order's status as its buyer reads it.
async fn status_of(app: &App, order: u64, buyer: u64) -> String {
    let read = app.get_as(&format!("/orders/{order}"), buyer).await;
    assert_eq!(read.status, StatusCode::OK, "{read:?}");
    read.body["status"].as_str().unwrap().to_string()
}

/// Sales each with one unpaid order whose sweeps cannot run for now (their sweep leases
/// held, as by sweeps of another host under way, or on a Redis shard that is down): more
/// than a read of the feed expires, and past their deadline before the orders made after
/// this. Returns each sale with its lease, to let go of.
async fn unsweepable_backlog(app: &Arc<App>, sales: u64) -> Vec<(u64, String)> {
    let mut sold = JoinSet::new();
    for buyer in 7600..7600 + sales {
        let app = app.clone();
        sold.spawn(async move {
            let voucher = voucher(&app, 1, 1).await;
            order_of(&app.buy(voucher, buyer).await);
            (voucher, Keys::new(BucketId::from_raw(voucher)).sweep())
        });
    }
    let backlog = sold.join_all().await;
    let mut redis = local::redis().await;
    for (_, lease) in &backlog {
        let _: () = redis.set_ex(lease, "held", 60).await.unwrap();
    }
    backlog
}

/// Orders of other sales (a storefront's beside this, in MySQL alone), `per_second` of
/// them falling due each second from `from_s` seconds on for `seconds`: many more sales a
/// second than a read's sweeps could take one by one.
async fn sales_falling_due(from_s: u64, per_second: u64, seconds: u64) {
    use mysql_async::prelude::Queryable;
    let rows: Vec<String> = (0..per_second * seconds)
        .map(|n| {
            let sale = local::fresh_voucher_id();
            let due_s = from_s + n / per_second;
            format!(
                "({}, 1, {sale}, 1, UTC_TIMESTAMP(), UTC_TIMESTAMP() + INTERVAL {due_s} SECOND, \
                 {sale})",
                (1u64 << 63) | sale
            )
        })
        .collect();
    let mut conn = local::mysql().get_conn().await.unwrap();
    conn.query_drop(format!(
        "INSERT INTO tb_voucher_order \
         (id, user_id, voucher_id, status, create_time, expire_time, sale_id) VALUES {}",
        rows.join(", ")
    ))
    .await
    .unwrap();
}

/// What MySQL holds of the sales' orders still unpaid, and each sale's sweep lease, for a
/// failure's message.
async fn unpaid_of(vouchers: &[u64]) -> String {
    use mysql_async::prelude::Queryable;
    let mut conn = local::mysql().get_conn().await.unwrap();
    let mut redis = local::redis().await;
    let mut told = String::new();
    for &voucher in vouchers {
        let rows: Vec<(u64, i64)> = conn
            .exec(
                "SELECT id, TIMESTAMPDIFF(SECOND, expire_time, UTC_TIMESTAMP()) \
                 FROM tb_voucher_order WHERE voucher_id = ? AND status = 1",
                (voucher,),
            )
            .await
            .unwrap();
        let lease: i64 = redis
            .pttl(Keys::new(BucketId::from_raw(voucher)).sweep())
            .await
            .unwrap();
        told +=
            &format!("voucher {voucher}: unpaid (order, s overdue) {rows:?}, lease {lease} ms\n");
    }
    told
}

#[tokio::test]
async fn an_order_nobody_presses_for_expires_with_only_its_readers() {
    let app = Arc::new(app().await);
    let start = cursor_now(&app).await;
    // A backlog of older deadlines the sweeps cannot clear now must not hold the new ones
    // back, nor may a flow of newer ones (below).
    let backlog = unsweepable_backlog(&app, 80).await;
    let pay_within_s = 2;
    // Two sales that ended, each with an unpaid order: one whose buyer reads her order,
    // one read by nobody but the feed (a live sale's product pages: edges.rs).
    let (read, fed) = (
        voucher(&app, 2, pay_within_s).await,
        voucher(&app, 2, pay_within_s).await,
    );
    let (reader, forgotten, payer) = (7501, 7503, 7504);
    let reader_order = order_of(&app.buy(read, reader).await);
    let forgotten_order = order_of(&app.buy(fed, forgotten).await);
    let paid = order_of(&app.buy(fed, payer).await);
    let ordered_at = std::time::Instant::now();
    // Right after these deadlines, other sales' orders fall due in a steady flow: each
    // order expires behind those due before it alone.
    sales_falling_due(pay_within_s + 1, 150, 10).await;
    assert_eq!(
        post(&app, &format!("/orders/{paid}/pay"), PAYMENTS_TOKEN)
            .await
            .status,
        StatusCode::OK
    );
    for voucher in [read, fed] {
        let ended = post(&app, &format!("/vouchers/{voucher}/end"), ADMIN_TOKEN).await;
        assert_eq!(ended.status, StatusCode::OK, "{ended:?}");
    }
    assert_eq!(status_of(&app, reader_order, reader).await, "unpaid");
    tokio::time::sleep(Duration::from_millis(pay_within_s * 1000 + 1100)).await;

    // Past the deadline her read shows it expired, never unpaid.
    assert_eq!(status_of(&app, reader_order, reader).await, "expired");
    // The feed, read once a second by the systems downstream (page after page when they
    // have fallen behind), says so of every order.
    let mut expired = HashMap::new();
    let mut cursor = start.clone();
    while expired.len() < 2 {
        if ordered_at.elapsed() > Duration::from_secs(pay_within_s + 15) {
            panic!(
                "the feed said order.expired of {expired:?} only; MySQL:\n{}\
                 the request log's troubles:\n{}",
                unpaid_of(&[read, fed]).await,
                app.troubles()
            );
        }
        let (events, next) = feed(&app, &cursor, 100).await;
        cursor = next;
        // A full page: the reader has more to catch up on, and reads on at once.
        let caught_up = events.len() < 100;
        for event in events {
            let voucher = event["voucher_id"].as_u64().unwrap();
            if [read, fed].contains(&voucher) && event["type"] == "order.expired" {
                let order: u64 = event["order_id"].as_str().unwrap().parse().unwrap();
                assert_eq!(
                    expired.insert(order, voucher),
                    None,
                    "{order} expired twice"
                );
                let past = ordered_at.elapsed().as_secs_f64() - pay_within_s as f64;
                println!("order.expired of {order} read {past:.1} s after its deadline");
            }
        }
        if caught_up {
            tokio::time::sleep(Duration::from_millis(1000)).await;
        }
    }
    assert_eq!(
        expired,
        HashMap::from([(reader_order, read), (forgotten_order, fed)])
    );
    for (voucher, statuses, stock) in [
        (read, HashMap::from([(reader_order, 7)]), 2),
        (fed, HashMap::from([(forgotten_order, 7), (paid, 2)]), 1),
    ] {
        let record = invariants::read(voucher).await;
        record.assert_settled(&[]);
        assert_eq!(record.statuses, statuses);
        assert_eq!(record.mysql_stock, stock);
    }
    // The backlog's orders expire too, their sweeps still held: MySQL takes their units
    // back, and Redis has them at the sale's next sweep, once its lease is free. They
    // expire oldest first with every sale's, at the feed's pace (a read a second), behind
    // whatever overdue orders earlier suites left.
    let witness = backlog[0].0;
    let mut cursor = start;
    let order = loop {
        let (events, next) = feed(&app, &cursor, 1000).await;
        cursor = next;
        let expired = events
            .iter()
            .find(|event| event["voucher_id"] == witness && event["type"] == "order.expired");
        if let Some(event) = expired {
            break event["order_id"].as_str().unwrap().parse::<u64>().unwrap();
        }
        if ordered_at.elapsed() > Duration::from_secs(pay_within_s + 120) {
            panic!("never expired:\n{}", unpaid_of(&[witness]).await);
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
    };
    let held = invariants::read(witness).await;
    assert_eq!(held.statuses, HashMap::from([(order, 7)]));
    assert_eq!((held.mysql_stock, held.redis_stock), (1, Some(0)));
    let leases: Vec<String> = backlog.into_iter().map(|(_, lease)| lease).collect();
    let _: () = local::redis().await.del(leases).await.unwrap();
    let late = order_of(&app.buy(witness, 7599).await);
    let record = invariants::read(witness).await;
    record.assert_settled(&[(late, 7599)]);
    assert_eq!(record.statuses, HashMap::from([(order, 7), (late, 1)]));
}
