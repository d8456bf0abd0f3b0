//! Changing a sale under real Spin (docs/design.md, "Changing a sale"): before it opens
//! anything but its buckets; once open its title, description, a later end and more
//! stock, each restock reaching Redis and MySQL once, whatever the buckets, racing a crowd
//! and a sync; once ended its title and description. What cannot change is a `409`
//! naming the field; every change is a feed event; the orders go out as CSV, the rows
//! MySQL holds.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use seckill_tests::drivers::app::{Answer, App, ADMIN_TOKEN};
use seckill_tests::drivers::crowd::{assert_promises, sale, size, Storefront};
use seckill_tests::drivers::invariants;
use seckill_tests::servers::local::{mysql_exec, mysql_first, mysql_rows, redis};

async fn change(app: &App, voucher: u64, body: Value) -> Answer {
    let path = format!("/vouchers/{voucher}");
    app.call(Method::PATCH, &path, Some(ADMIN_TOKEN), Some(body))
        .await
}

/// The field a `409 cannot_change` names.
async fn refused(app: &App, voucher: u64, body: Value) -> String {
    let answer = change(app, voucher, body).await;
    assert_eq!(answer.status, StatusCode::CONFLICT, "{answer:?}");
    assert_eq!(answer.error(), "cannot_change", "{answer:?}");
    answer.body["field"].as_str().unwrap().to_string()
}

fn at(offset_s: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::seconds(offset_s))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The sale's feed events of a type: how many, and the units they carry.
async fn sale_events(voucher: u64, kind: u8) -> (u64, u64) {
    mysql_rows::<(u64, u64)>(
        "SELECT COUNT(*), CAST(COALESCE(SUM(units), 0) AS UNSIGNED) FROM tb_order_event \
         WHERE type = ? AND voucher_id IN \
           (SELECT voucher_id FROM tb_seckill_voucher WHERE sale_id = ?)",
        (kind, voucher),
    )
    .await[0]
}

/// A field of every bucket's Redis hash.
async fn redis_fields(voucher: u64, field: &str) -> Vec<Option<String>> {
    let buckets: Vec<u64> = mysql_rows(
        "SELECT voucher_id FROM tb_seckill_voucher WHERE sale_id = ? ORDER BY voucher_id",
        (voucher,),
    )
    .await;
    let mut redis = redis().await;
    let mut fields = Vec::new();
    for bucket in buckets {
        let key = format!("seckill:{{{bucket}}}:voucher");
        let value: Option<String> = redis::cmd("HGET")
            .arg(&key)
            .arg(field)
            .query_async(&mut redis)
            .await
            .unwrap();
        fields.push(value);
    }
    fields
}

#[tokio::test(flavor = "multi_thread")]
async fn before_it_opens_a_sale_takes_any_change_but_its_buckets() {
    let app = App::start().await;
    let voucher = app
        .create(json!({"stock": 10, "buckets": 2}), 3600, 7200)
        .await;
    let fed_before: u64 = mysql_first("SELECT COALESCE(MAX(seq), 0) FROM tb_order_event", ())
        .await
        .unwrap();
    let begin = at(1800);
    let changed = change(
        &app,
        voucher,
        json!({"title": "改名 <b>sale</b>", "description": "new", "stock": 7, "begin_time": begin,
               "end_time": at(5400), "per_buyer": 3, "pay_within_s": 120}),
    )
    .await;
    assert_eq!(changed.status, StatusCode::OK, "{changed:?}");
    for (field, value) in [
        ("title", json!("改名 <b>sale</b>")),
        ("stock", json!(7)),
        ("remaining", json!(7)),
        ("begin_time", json!(begin)),
        ("per_buyer", json!(3)),
        ("pay_within_s", json!(120)),
        ("buckets", json!(2)),
        ("orders", json!(0)),
        ("status", json!("upcoming")),
    ] {
        assert_eq!(changed.body[field], value, "{field}: {changed:?}");
    }
    // Both stores hold the new terms, the units spread over the buckets as a creation
    // spreads them.
    let rows: Vec<(u64, u64, u64)> = mysql_rows(
        "SELECT initial_stock, stock, per_buyer FROM tb_seckill_voucher WHERE sale_id = ? \
         ORDER BY voucher_id",
        (voucher,),
    )
    .await;
    assert_eq!(rows, [(4, 4, 3), (3, 3, 3)]);
    let some = |values: &[&str]| {
        values
            .iter()
            .map(|v| Some(v.to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(redis_fields(voucher, "stock").await, some(&["4", "3"]));
    assert_eq!(redis_fields(voucher, "per_buyer").await, some(&["3", "3"]));
    assert_eq!(
        redis_fields(voucher, "title").await,
        some(&["改名 <b>sale</b>", "改名 <b>sale</b>"])
    );
    let page = app
        .call(Method::GET, &format!("/vouchers/{voucher}"), None, None)
        .await;
    assert_eq!(
        (&page.body["title"], &page.body["stock"]),
        (&json!("改名 <b>sale</b>"), &json!(7))
    );

    assert_eq!(
        refused(&app, voucher, json!({"buckets": 3})).await,
        "buckets"
    );
    let invalid = change(&app, voucher, json!({"per_buyer": 11})).await;
    assert_eq!(invalid.status, StatusCode::BAD_REQUEST, "{invalid:?}");
    assert_eq!(invalid.body["field"], "per_buyer");
    let unknown = change(&app, voucher, json!({"colour": "red"})).await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST, "{unknown:?}");
    // The same change again changes nothing more: one sale.changed event (type 6).
    let again = change(&app, voucher, json!({"stock": 7, "per_buyer": 3})).await;
    assert_eq!(again.status, StatusCode::OK, "{again:?}");
    assert_eq!(sale_events(voucher, 6).await, (1, 0));
    // The feed says so, naming no order and no buyer. Events other runs left unread are
    // placed before it: the pages are read to the feed's end.
    let mut ours: Vec<Value> = Vec::new();
    let mut cursor = fed_before.to_string();
    loop {
        let page = app
            .get(&format!("/events?after={cursor}&limit=1000"), ADMIN_TOKEN)
            .await;
        assert_eq!(page.status, StatusCode::OK, "{page:?}");
        let events = page.body["events"].as_array().unwrap();
        ours.extend(
            events
                .iter()
                .filter(|event| event["voucher_id"] == json!(voucher))
                .cloned(),
        );
        if events.is_empty() {
            break;
        }
        cursor = page.body["next"].as_str().unwrap().to_string();
    }
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(
        (
            &ours[0]["type"],
            &ours[0]["order_id"],
            &ours[0]["user_id"],
            &ours[0]["quantity"]
        ),
        (
            &json!("sale.changed"),
            &Value::Null,
            &Value::Null,
            &json!(0)
        )
    );
    let missing = change(&app, voucher + 1_000_000, json!({"title": "x"})).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{missing:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_that_opens_the_sale_now_gives_redis_its_new_units() {
    let app = App::start().await;
    let voucher = app
        .create(json!({"stock": 2, "buckets": 2}), 3600, 7200)
        .await;
    let changed = change(&app, voucher, json!({"stock": 5, "begin_time": at(-1)})).await;
    assert_eq!(changed.status, StatusCode::OK, "{changed:?}");
    assert_eq!(changed.body["status"], "live", "{changed:?}");
    let some = |values: &[&str]| {
        values
            .iter()
            .map(|v| Some(v.to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(redis_fields(voucher, "stock").await, some(&["3", "2"]));
    assert_eq!(
        redis_fields(voucher, "initial_stock").await,
        some(&["3", "2"])
    );
    for user in 9_305_001..9_305_006 {
        assert_eq!(
            app.buy(voucher, user).await.status,
            StatusCode::CREATED,
            "{user}"
        );
    }
    assert_eq!(app.buy(voucher, 9_305_009).await.error(), "sold_out");
}

/// Orders committed say a sale opened, whatever the clocks say: MySQL refuses a change
/// only an unopened sale may take once it holds one (a Redis whose clock runs ahead
/// admitted it), and an ended sale, even one ended before it opened, takes new words.
#[tokio::test(flavor = "multi_thread")]
async fn orders_committed_refuse_a_reshape_and_an_ended_sale_takes_new_words() {
    let app = App::start().await;
    let voucher = app.voucher(3, 3600, 7200).await;
    let orders = "UPDATE tb_seckill_voucher SET orders = ? WHERE voucher_id = ?";
    mysql_exec(orders, (1, voucher)).await;
    refused(&app, voucher, json!({"per_buyer": 2})).await;
    mysql_exec(orders, (0, voucher)).await;
    let ended = app
        .post(&format!("/vouchers/{voucher}/end"), ADMIN_TOKEN)
        .await;
    assert_eq!(ended.status, StatusCode::OK, "{ended:?}");
    let renamed = change(&app, voucher, json!({"title": "over before it began"})).await;
    assert_eq!(renamed.status, StatusCode::OK, "{renamed:?}");
    assert_eq!(renamed.body["title"], "over before it began");
    assert_eq!(
        refused(&app, voucher, json!({"per_buyer": 2})).await,
        "per_buyer"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn once_open_only_its_words_a_later_end_and_more_stock_change_and_once_ended_its_words() {
    let app = App::start().await;
    let voucher = app.live_voucher(2).await;
    for (body, field) in [
        (json!({"per_buyer": 2}), "per_buyer"),
        (json!({"pay_within_s": 60}), "pay_within_s"),
        (json!({"begin_time": at(600)}), "begin_time"),
        (json!({"draw_ms": 1000}), "draw_ms"),
        (json!({"stock": 1}), "stock"),
        (json!({"end_time": at(1800)}), "end_time"),
        (json!({"buckets": 2}), "buckets"),
    ] {
        assert_eq!(refused(&app, voucher, body.clone()).await, field, "{body}");
    }
    let later = at(7200);
    let changed = change(
        &app,
        voucher,
        json!({"title": "renamed", "end_time": later}),
    )
    .await;
    assert_eq!(changed.status, StatusCode::OK, "{changed:?}");
    assert_eq!(
        (&changed.body["title"], &changed.body["end_time"]),
        (&json!("renamed"), &json!(later))
    );
    assert_eq!(
        app.buy(voucher, 9_300_001).await.status,
        StatusCode::CREATED
    );

    let ended = app
        .post(&format!("/vouchers/{voucher}/end"), ADMIN_TOKEN)
        .await;
    assert_eq!(ended.status, StatusCode::OK, "{ended:?}");
    assert_eq!(
        refused(&app, voucher, json!({"end_time": at(9000)})).await,
        "end_time"
    );
    assert_eq!(refused(&app, voucher, json!({"stock": 5})).await, "stock");
    let renamed = change(&app, voucher, json!({"description": "over"})).await;
    assert_eq!(renamed.status, StatusCode::OK, "{renamed:?}");
    assert_eq!(renamed.body["status"], "ended");
    // Its window in Redis stayed ended.
    assert_eq!(app.buy(voucher, 9_300_002).await.error(), "ended");
    assert_eq!(sale_events(voucher, 6).await, (2, 0));
}

/// A restock racing a crowd, a sync and the group commit, in one bucket and in several:
/// every unit, the first stock's and the restocks', sold once, to the buyers pressing.
#[tokio::test(flavor = "multi_thread")]
async fn restocks_racing_a_crowd_and_a_sync_sell_every_unit_once_whatever_the_buckets() {
    let app = App::start().await;
    let front = Storefront::new(format!("http://{}", app.addr()));
    for (buckets, first_user) in [(1, 9_310_000), (3, 9_320_000)] {
        let (stock, buyers, spread) = size((200, 2000, 6), (20, 240, 3));
        let voucher = front.create_bucketed(stock, buckets).await;
        let crowd = sale(&front, voucher, first_user, buyers, spread, 64);
        let (first, second) = (stock / 2 + buckets, stock / 4 + 1);
        tokio::time::sleep(spread / 4).await;
        let restocked = change(&app, voucher, json!({"stock": stock + first})).await;
        assert_eq!(restocked.status, StatusCode::OK, "{restocked:?}");
        let synced = app
            .post(&format!("/vouchers/{voucher}/sync"), ADMIN_TOKEN)
            .await;
        assert!(
            [
                StatusCode::OK,
                StatusCode::CONFLICT,
                StatusCode::SERVICE_UNAVAILABLE
            ]
            .contains(&synced.status),
            "{synced:?}"
        );
        tokio::time::sleep(spread / 4).await;
        let total = stock + first + second;
        let restocked = change(&app, voucher, json!({"stock": total})).await;
        assert_eq!(restocked.status, StatusCode::OK, "{restocked:?}");
        assert_eq!(restocked.body["stock"], total);
        let finals = crowd.await.unwrap();
        assert_promises(&front, voucher, total, &finals, invariants::read).await;
        // Each restock is one event per bucket it added units to, carrying them: both add
        // at least a unit a bucket here.
        assert!(first.min(second) >= buckets);
        let (events, units) = sale_events(voucher, 5).await;
        assert_eq!(
            (events, units),
            (2 * buckets, first + second),
            "buckets {buckets}"
        );
        let initial: Vec<String> = redis_fields(voucher, "initial_stock")
            .await
            .into_iter()
            .map(Option::unwrap)
            .collect();
        let in_redis: u64 = initial.iter().map(|n| n.parse::<u64>().unwrap()).sum();
        assert_eq!(in_redis, total, "Redis counts every restock's units once");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restock_goes_to_the_line_first_in_its_order() {
    let app = App::start().await;
    let voucher = app.live_voucher(1).await;
    assert_eq!(
        app.buy(voucher, 9_330_001).await.status,
        StatusCode::CREATED
    );
    let waiting = [9_330_002, 9_330_003];
    for user in waiting {
        let joined = app
            .post_as(&format!("/vouchers/{voucher}/line"), user)
            .await;
        assert_eq!(joined.status, StatusCode::ACCEPTED, "{joined:?}");
    }
    let restocked = change(&app, voucher, json!({"stock": 3})).await;
    assert_eq!(restocked.status, StatusCode::OK, "{restocked:?}");
    // A buyer who never joined finds nothing: the units wait for those in line.
    assert_eq!(app.buy(voucher, 9_330_009).await.error(), "sold_out");
    for user in waiting {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let looked = app.get_as(&format!("/vouchers/{voucher}/line"), user).await;
            if looked.body["status"] == "ordered" {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{looked:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let orders: u64 = mysql_first(
        "SELECT COUNT(*) FROM tb_voucher_order WHERE sale_id = ?",
        (voucher,),
    )
    .await
    .unwrap();
    assert_eq!(orders, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_orders_go_out_as_csv_the_rows_mysql_holds() {
    let app = App::start().await;
    let voucher = app
        .create(json!({"stock": 6, "per_buyer": 2}), -60, 3600)
        .await;
    for (user, units) in [(9_340_001, 2), (9_340_002, 1), (9_340_003, 2)] {
        let bought = app.buy_units(voucher, user, units).await;
        assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    }
    let order = app.buy(voucher, 9_340_004).await.order_id().unwrap();
    assert_eq!(app.cancel(order, 9_340_004).await.status, StatusCode::OK);
    let path = format!("/vouchers/{voucher}/orders.csv");
    let csv = app.get(&path, ADMIN_TOKEN).await;
    assert_eq!(csv.status, StatusCode::OK, "{csv:?}");
    assert_eq!(csv.headers["content-type"], "text/csv; charset=utf-8");
    assert_eq!(
        csv.headers["content-disposition"],
        format!("attachment; filename=\"voucher-{voucher}-orders.csv\"")
    );
    let rows: Vec<(u64, u64, u8, u32, String)> = mysql_rows(
        "SELECT id, user_id, status, quantity, \
         DATE_FORMAT(create_time, '%Y-%m-%dT%H:%i:%sZ') FROM tb_voucher_order \
         WHERE sale_id = ? ORDER BY id",
        (voucher,),
    )
    .await;
    let names = [
        "",
        "unpaid",
        "paid",
        "used",
        "cancelled",
        "refunding",
        "refunded",
        "expired",
    ];
    let mut expected = String::from("order_id,user_id,status,quantity,created_at\n");
    for (id, user, status, quantity, at) in &rows {
        expected.push_str(&format!(
            "{id},{user},{},{quantity},{at}\n",
            names[*status as usize]
        ));
    }
    assert_eq!(rows.len(), 4);
    assert_eq!(csv.body.as_str().unwrap(), expected);
    for token in [None, Some("not-the-admin")] {
        let refused = app.call(Method::GET, &path, token, None).await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{refused:?}");
    }
}
