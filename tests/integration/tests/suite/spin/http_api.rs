//! The API contract end to end: the built component under real Spin, real Redis and
//! MariaDB behind it, spoken to over HTTP. Every endpoint and every error code is checked
//! for its exact status, body shape and headers, and failing requests are checked to
//! leave MySQL and Redis as they were.
//!
//! Each test starts its own host and creates its own vouchers, so the tests run in
//! parallel; the host compiles the component once per process.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use redis::AsyncCommands;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use seckill_core::sale::{Decision, Entry, Forget, Keys, Record, Unlist, STALE};
use seckill_core::sql;
use seckill_core::verdict::Verdict;
use seckill_core::{BucketId, UserId};

use seckill_tests::drivers::app::{
    answer, behind_proxy, buyer_token, signed_token, Answer, App, ADMIN_TOKEN, JWT_SECRET,
};
use seckill_tests::drivers::invariants::{read, SaleRecord};
use seckill_tests::drivers::scripts::{self, outcome, Sale};
use seckill_tests::servers::faults::{backend_env, free_port, Manifest};
use seckill_tests::servers::local::{fresh_voucher_id, mysql, mysql_exec, mysql_first, redis};
use tokio::task::JoinSet;

const MAX_BODY_BYTES: usize = 16 * 1024;
/// base64url of `{"alg":"none","typ":"JWT"}`.
const ALG_NONE_HEADER: &str = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0";
/// Canonical, within 63 bits, and never allocated (ids carry seconds since 2024 in
/// their high bits; this one is the year 2092).
const UNKNOWN_ORDER: &str = "9223372036854775807";
/// The shared Redis (`seckill_tests::servers::local`), for a host with a MySQL proxy.
const REDIS_PORT: u16 = 6379;

// ---- answers ------------------------------------------------------------------------

fn keys(body: &Value) -> BTreeSet<&str> {
    body.as_object()
        .unwrap_or_else(|| panic!("not a JSON object: {body}"))
        .keys()
        .map(String::as_str)
        .collect()
}

/// Every answer, success or error, is JSON.
fn assert_json(answer: &Answer) {
    let content_type = answer.headers.get("content-type").map(|v| v.as_bytes());
    assert_eq!(
        content_type,
        Some(&b"application/json"[..]),
        "Content-Type of {answer:?}"
    );
}

/// A success with exactly these body fields.
fn assert_ok(answer: &Answer, status: StatusCode, fields: &[&str]) {
    assert_eq!(answer.status, status, "{answer:?}");
    assert_json(answer);
    assert_eq!(
        keys(&answer.body),
        fields.iter().copied().collect(),
        "{answer:?}"
    );
}

/// `{"error": code, "message": text}` (plus `order_id` for `already_ordered`, and the
/// `field` at fault of a `bad_request` that names one).
fn assert_error(answer: &Answer, status: StatusCode, code: &str) {
    assert_eq!(answer.status, status, "{answer:?}");
    assert_json(answer);
    assert_eq!(answer.error(), code, "{answer:?}");
    let message = answer.body["message"].as_str().unwrap_or("");
    assert!(!message.is_empty(), "no message in {answer:?}");
    let mut expected = BTreeSet::from(["error", "message"]);
    if code == "already_ordered" {
        expected.insert("order_id");
    }
    if code == "bad_request" && answer.body.get("field").is_some() {
        expected.insert("field");
    }
    assert_eq!(keys(&answer.body), expected, "{answer:?}");
}

/// A purchase receipt for `user`; returns the order id.
fn assert_receipt(answer: &Answer, voucher: u64, user: u64) -> u64 {
    assert_ok(
        answer,
        StatusCode::CREATED,
        &["order_id", "voucher_id", "user_id", "quantity"],
    );
    assert_eq!(answer.body["voucher_id"], json!(voucher), "{answer:?}");
    assert_eq!(answer.body["quantity"], json!(1), "{answer:?}");
    assert_eq!(
        answer.body["user_id"],
        json!(user.to_string()),
        "{answer:?}"
    );
    answer.order_id().expect("order_id is a decimal string")
}

/// A voucher view with every field, its `server_time` the clock of this machine (Redis
/// and MySQL run here) to within a few seconds; returns the other fields for checks.
fn assert_voucher(answer: &Answer, status: StatusCode, id: u64) -> Value {
    let fields = [
        "id",
        "title",
        "description",
        "stock",
        "remaining",
        "begin_time",
        "end_time",
        "status",
        "pay_within_s",
        "server_time",
        "draw_at",
        "per_buyer",
        "announce_at",
    ];
    assert_ok(answer, status, &fields);
    assert_eq!(answer.body["id"], json!(id), "{answer:?}");
    let server_time = answer.body["server_time"].as_str().unwrap_or_default();
    let server_time = chrono::DateTime::parse_from_rfc3339(server_time)
        .unwrap_or_else(|e| panic!("server_time {server_time:?}: {e}"));
    let skew = chrono::Utc::now().signed_duration_since(server_time);
    assert!(skew.num_seconds().abs() <= 5, "server_time off by {skew}");
    let mut view = answer.body.clone();
    view.as_object_mut().unwrap().remove("server_time");
    view
}

// ---- requests -----------------------------------------------------------------------

/// A request with a raw body and an explicit (or no) Content-Type.
async fn send_raw(
    app: &App,
    method: Method,
    path: &str,
    authorization: Option<&str>,
    content_type: Option<&str>,
    body: String,
) -> Answer {
    let mut request = app
        .client
        .request(method, format!("{}{path}", app.base))
        .body(body);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    if let Some(value) = content_type {
        request = request.header("content-type", value);
    }
    answer(request.send().await.expect("the host answers")).await
}

/// A live sale of `stock` units with `buyer`'s order in it (its receipt checked): the
/// voucher and the order.
async fn sale_with_order(app: &App, stock: u64, buyer: u64) -> (u64, u64) {
    let voucher = app.live_voucher(stock).await;
    let order = assert_receipt(&app.buy(voucher, buyer).await, voucher, buyer);
    (voucher, order)
}

async fn get(app: &App, path: &str, token: Option<&str>) -> Answer {
    app.call(Method::GET, path, token, None).await
}

async fn sync(app: &App, voucher: u64, token: &str) -> Answer {
    let path = format!("/vouchers/{voucher}/sync");
    app.post(&path, token).await
}

/// A create-voucher body for a sale in 2030, tagged with `marker` in its description so
/// that a test can tell whether it was stored.
fn new_voucher(marker: &str) -> Value {
    json!({
        "title": "contract test",
        "description": marker,
        "stock": 5,
        "begin_time": "2030-01-01T00:00:00Z",
        "end_time": "2030-01-02T00:00:00Z",
    })
}

/// A description no other request (in this run or an earlier one) uses.
fn marker(label: &str) -> String {
    format!("{label}-{}", fresh_voucher_id())
}

// ---- backends -----------------------------------------------------------------------

/// How many vouchers MySQL holds whose description starts with `marker`.
async fn vouchers_marked(marker: &str) -> u64 {
    let sql = "SELECT COUNT(*) FROM tb_voucher WHERE description LIKE CONCAT(?, '%')";
    mysql_first(sql, (marker,)).await.unwrap()
}

/// The voucher's row as MySQL holds it: title, description, initial stock, stock and the
/// window as unix seconds.
async fn voucher_row(id: u64) -> (String, String, u64, u64, i64, i64) {
    let sql = "SELECT v.title, v.description, s.initial_stock, s.stock, \
         TIMESTAMPDIFF(SECOND, '1970-01-01', s.begin_time), \
         TIMESTAMPDIFF(SECOND, '1970-01-01', s.end_time) \
         FROM tb_voucher v JOIN tb_seckill_voucher s ON s.voucher_id = v.id WHERE v.id = ?";
    mysql_first(sql, (id,)).await.expect("voucher in MySQL")
}

/// The keys of the voucher's sale state in Redis.
fn sale_keys(voucher: u64) -> Keys {
    Keys::new(BucketId::from_raw(voucher))
}

async fn redis_hash(key: String) -> HashMap<String, String> {
    redis().await.hgetall(key).await.unwrap()
}

/// Buys as `user` and expects the refusal `code`, with MySQL and Redis unchanged.
async fn assert_refused(app: &App, voucher: u64, user: u64, code: &str) -> Answer {
    // A 201 leaves before its batch's publication: let that land first.
    driver(voucher).await.drained().await;
    let (before, buyers_before) = (
        read(voucher).await,
        redis_hash(sale_keys(voucher).buyers()).await,
    );
    let answer = app.buy(voucher, user).await;
    assert_error(&answer, StatusCode::CONFLICT, code);
    assert_eq!(read(voucher).await, before, "{code} changed the sale");
    assert_eq!(redis_hash(sale_keys(voucher).buyers()).await, buyers_before);
    answer
}

// ---- health and vouchers ------------------------------------------------------------

#[tokio::test]
async fn health_reports_both_backends_up() {
    let app = App::start().await;
    let answer = get(&app, "/health", Some(ADMIN_TOKEN)).await;
    // Other tests sharing this Redis may have a voucher listed as stale, or as behind in
    // MySQL (which makes the status `degraded`), meanwhile.
    let mut body = answer.body.clone();
    let fields = body.as_object_mut().unwrap();
    if let Some(stale) = fields.remove("stale_vouchers") {
        assert!(stale.is_array(), "{answer:?}");
    }
    let status = match fields.remove("mysql_behind_vouchers") {
        Some(behind) => {
            assert!(behind.is_array(), "{answer:?}");
            "degraded"
        }
        None => "ok",
    };
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(
        body,
        json!({"status": status, "redis": "ok", "mysql": "ok"})
    );
}

#[tokio::test]
async fn health_tells_which_vouchers_wait_to_operators_only() {
    let app = App::start().await;
    let voucher = fresh_voucher_id();
    let mut conn = redis().await;
    let _: () = conn.sadd(STALE, voucher.to_string()).await.unwrap();
    // Anyone (a balancer, a stranger, a buyer): up or down, nothing more.
    let buyer = buyer_token(7);
    for token in [None, Some(buyer.as_str()), Some("not-a-token")] {
        let answer = get(&app, "/health", token).await;
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
        assert_eq!(
            answer.body,
            json!({"status": "ok", "redis": "ok", "mysql": "ok"}),
            "{token:?}"
        );
    }
    // The admin sees the voucher waiting for a sync.
    let answer = get(&app, "/health", Some(ADMIN_TOKEN)).await;
    let _: () = conn.srem(STALE, voucher.to_string()).await.unwrap();
    let stale = answer.body["stale_vouchers"].as_array().cloned();
    assert!(
        stale.unwrap_or_default().contains(&json!(voucher)),
        "{answer:?}"
    );
}

#[tokio::test]
async fn liveness_asks_nothing_of_the_backends_and_readiness_does() {
    // Neither backend answers: nothing listens on these ports.
    let (redis_port, mysql_port) = (free_port(), free_port());
    let manifest = Manifest::with_absolute_paths();
    let app = App::start_with(manifest.path(), backend_env(redis_port, mysql_port)).await;
    let live = get(&app, "/health/live", None).await;
    assert_ok(&live, StatusCode::OK, &["status"]);
    assert_eq!(live.body, json!({"status": "live"}));
    let ready = get(&app, "/health", None).await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE, "{ready:?}");
}

#[tokio::test]
async fn creating_a_voucher_stores_it_and_preloads_redis() {
    let app = App::start().await;
    // The upper bounds are accepted: 128 characters of title (384 bytes) and 10,000,000
    // units. Times are normalised to UTC seconds.
    let title = "券".repeat(128);
    let description = marker("created");
    let body = json!({
        "title": title,
        "description": description,
        "stock": 10_000_000,
        "begin_time": "2030-01-01T08:00:00.900+08:00",
        "end_time": "2030-01-02T00:00:00Z",
    });
    let created = app
        .call(Method::POST, "/vouchers", Some(ADMIN_TOKEN), Some(body))
        .await;
    let id = created.body["id"].as_u64().expect("numeric voucher id");
    let view = assert_voucher(&created, StatusCode::CREATED, id);
    let expected = json!({
        "id": id,
        "title": title,
        "description": description,
        "stock": 10_000_000,
        "remaining": 10_000_000,
        "begin_time": "2030-01-01T00:00:00Z",
        "end_time": "2030-01-02T00:00:00Z",
        "status": "upcoming",
        "pay_within_s": 900,
        "draw_at": null,
        "per_buyer": 1,
        "announce_at": null,
    });
    assert_eq!(view, expected);

    let (begin, end) = (1_893_456_000_i64, 1_893_542_400_i64);
    assert_eq!(
        voucher_row(id).await,
        (
            title.clone(),
            description.clone(),
            10_000_000,
            10_000_000,
            begin,
            end
        )
    );
    let preloaded = redis_hash(sale_keys(id).voucher()).await;
    let created = scripts::lookup(BucketId::from_raw(id))
        .await
        .unwrap()
        .created;
    let expected_redis: HashMap<String, String> = [
        ("stock", "10000000".to_string()),
        ("begin_ms", (begin * 1000).to_string()),
        ("end_ms", (end * 1000).to_string()),
        ("initial_stock", "10000000".to_string()),
        ("title", title.clone()),
        ("description", description.clone()),
        ("pay_within_s", "900".to_string()),
        ("returned_event", "0".to_string()),
        ("draw_ms", "0".to_string()),
        ("per_buyer", "1".to_string()),
        ("created", created.to_string()),
        ("announce_ms", "0".to_string()),
        ("terms_version", "0".to_string()),
        ("restocked_event", "0".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(preloaded, expected_redis);

    // Reading it back gives the same view; a description left out reads as "".
    let read_back = get(&app, &format!("/vouchers/{id}"), None).await;
    assert_eq!(assert_voucher(&read_back, StatusCode::OK, id), expected);
    let plain = app.live_voucher(1).await;
    let plain = get(&app, &format!("/vouchers/{plain}"), None).await;
    assert_eq!(plain.body["description"], "");
}

#[tokio::test]
async fn invalid_vouchers_are_bad_requests_and_create_nothing() {
    let app = App::start().await;
    let tag = marker("invalid");
    let edits: Vec<(&str, Value)> = vec![
        ("title", "".into()),
        ("title", "   ".into()),
        ("title", "x".repeat(129).into()),
        ("title", "券".repeat(129).into()),
        ("title", 7.into()),
        ("stock", 0.into()),
        ("stock", (-1).into()),
        ("stock", 10_000_001.into()),
        ("stock", "5".into()),
        ("stock", 5.5.into()),
        ("begin_time", "2030-01-02T00:00:00Z".into()), // end == begin
        ("begin_time", "2030-01-03T00:00:00Z".into()), // end before begin
        ("begin_time", "2030-01-01 00:00:00".into()),
        ("end_time", "tomorrow".into()),
        ("begin_time", "1969-12-31T23:59:59Z".into()),
        ("end_time", Value::Null),
        ("user_id", "1".into()), // unknown field
    ];
    let mut cases: Vec<(String, Option<&str>, String)> = Vec::new();
    for (field, value) in edits {
        let mut body = new_voucher(&tag);
        body[field] = value.clone();
        cases.push((
            format!("{field} = {value}"),
            Some("application/json"),
            body.to_string(),
        ));
    }
    let mut body = new_voucher(&tag);
    body.as_object_mut().unwrap().remove("end_time");
    cases.push((
        "missing end_time".into(),
        Some("application/json"),
        body.to_string(),
    ));
    let mut body = new_voucher(&tag);
    body["description"] = format!("{tag}{}", "d".repeat(1024)).into();
    cases.push((
        "long description".into(),
        Some("application/json"),
        body.to_string(),
    ));
    let valid = new_voucher(&tag).to_string();
    cases.push(("text/plain".into(), Some("text/plain"), valid.clone()));
    cases.push(("no content type".into(), None, valid.clone()));
    cases.push((
        "array".into(),
        Some("application/json"),
        format!("[{valid}]"),
    ));
    let truncated = valid[..valid.len() - 1].to_string();
    cases.push(("malformed".into(), Some("application/json"), truncated));

    let admin = format!("Bearer {ADMIN_TOKEN}");
    for (label, content_type, body) in cases {
        let answer = send_raw(
            &app,
            Method::POST,
            "/vouchers",
            Some(&admin),
            content_type,
            body,
        )
        .await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
        assert_eq!(vouchers_marked(&tag).await, 0, "{label} created a voucher");
    }
    // The same body, well formed, is accepted: the refusals above were for their edits.
    let answer = send_raw(
        &app,
        Method::POST,
        "/vouchers",
        Some(&admin),
        Some("application/json"),
        valid,
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
    assert_eq!(vouchers_marked(&tag).await, 1);
}

#[tokio::test]
async fn a_voucher_reports_its_status_and_what_remains() {
    let app = App::start().await;
    let upcoming = app.voucher(3, 3600, 7200).await;
    let live = app.live_voucher(3).await;
    let ended = app.voucher(3, -7200, -3600).await;
    let sold_out = app.live_voucher(1).await;
    assert_receipt(&app.buy(live, 11).await, live, 11);
    assert_receipt(&app.buy(sold_out, 11).await, sold_out, 11);

    for (id, status, stock, remaining) in [
        (upcoming, "upcoming", 3, 3),
        (live, "live", 3, 2),
        (ended, "ended", 3, 3),
        (sold_out, "sold_out", 1, 0),
    ] {
        let answer = get(&app, &format!("/vouchers/{id}"), None).await;
        let view = assert_voucher(&answer, StatusCode::OK, id);
        assert_eq!(
            (
                view["status"].as_str(),
                view["stock"].as_u64(),
                view["remaining"].as_u64()
            ),
            (Some(status), Some(stock), Some(remaining)),
            "{answer:?}"
        );
    }
}

#[tokio::test]
async fn a_voucher_is_read_from_redis_and_may_be_cached_for_a_second() {
    let app = App::start().await;
    let id = app.live_voucher(3).await;
    assert_receipt(&app.buy(id, 11).await, id, 11);
    // MySQL's copy changes behind Redis's back: the read shows Redis's, so it never
    // reached MySQL.
    let pool = mysql();
    let mut conn = pool.get_conn().await.unwrap();
    conn.exec_drop(
        "UPDATE tb_voucher SET title = 'changed in mysql' WHERE id = ?",
        (id,),
    )
    .await
    .unwrap();
    let path = format!("/vouchers/{id}");
    let answer = get(&app, &path, None).await;
    let view = assert_voucher(&answer, StatusCode::OK, id);
    assert_eq!(
        (&view["title"], &view["remaining"], &view["status"]),
        (
            &json!("integration test voucher"),
            &json!(2),
            &json!("live")
        )
    );
    assert_eq!(answer.headers["cache-control"], "public, max-age=1");
    // With no sale state in Redis, MySQL answers.
    let _: () = redis().await.del(sale_keys(id).voucher()).await.unwrap();
    let answer = get(&app, &path, None).await;
    let view = assert_voucher(&answer, StatusCode::OK, id);
    assert_eq!(
        (&view["title"], &view["remaining"]),
        (&json!("changed in mysql"), &json!(2))
    );
    drop(conn);
    pool.disconnect().await.unwrap();
    // A live sale Redis held nothing of is named stale until a sync loads it again.
    let sync = format!("/vouchers/{id}/sync");
    let synced = app.post(&sync, ADMIN_TOKEN).await;
    assert_eq!(synced.status, StatusCode::OK, "{synced:?}");
    // Errors other than a 404 are never cached.
    let bad = get(&app, "/vouchers/x", None).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.headers["cache-control"], "no-store");
}

#[tokio::test]
async fn voucher_ids_must_exist_and_be_canonical_numbers() {
    let app = App::start().await;
    let unknown = get(&app, &format!("/vouchers/{}", fresh_voucher_id()), None).await;
    assert_error(&unknown, StatusCode::NOT_FOUND, "not_found");
    let buyer = buyer_token(1);
    for bad in ["abc", "0", "007", "-1", "1.5", "9223372036854775808"] {
        for (method, path, token) in [
            (Method::GET, format!("/vouchers/{bad}"), None),
            (
                Method::POST,
                format!("/vouchers/{bad}/orders"),
                Some(buyer.as_str()),
            ),
            (
                Method::POST,
                format!("/vouchers/{bad}/sync"),
                Some(ADMIN_TOKEN),
            ),
        ] {
            let answer = app.call(method, &path, token, None).await;
            assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
        }
    }
}

// ---- purchases and orders -----------------------------------------------------------

#[tokio::test]
async fn a_purchase_is_recorded_and_readable_by_its_owner_and_the_admin() {
    let app = App::start().await;
    let (buyer, stranger) = (1001, 1002);
    let (voucher, order) = sale_with_order(&app, 5, buyer).await;
    let record = read(voucher).await;
    assert_eq!(record.orders, HashMap::from([(order, buyer)]));
    assert_eq!(record.mysql_stock, 4);
    record.assert_redis_agrees();

    let path = format!("/orders/{order}");
    let owner = get(&app, &path, Some(&buyer_token(buyer))).await;
    assert_ok(
        &owner,
        StatusCode::OK,
        &[
            "order_id",
            "voucher_id",
            "user_id",
            "status",
            "created_at",
            "quantity",
        ],
    );
    assert_eq!(owner.body["order_id"], json!(order.to_string()));
    assert_eq!(owner.body["quantity"], json!(1));
    assert_eq!(owner.body["voucher_id"], json!(voucher));
    assert_eq!(owner.body["user_id"], json!(buyer.to_string()));
    assert_eq!(owner.body["status"], "unpaid");
    let created_at = owner.body["created_at"].as_str().unwrap();
    assert!(created_at.ends_with('Z'), "{created_at}");
    let created_at = chrono::DateTime::parse_from_rfc3339(created_at).unwrap();
    let age = chrono::Utc::now().signed_duration_since(created_at);
    assert!((0..120).contains(&age.num_seconds()), "created {age} ago");

    let admin = get(&app, &path, Some(ADMIN_TOKEN)).await;
    assert_eq!((admin.status, &admin.body), (StatusCode::OK, &owner.body));

    // Another buyer cannot tell this order from one that does not exist.
    let other = get(&app, &path, Some(&buyer_token(stranger))).await;
    assert_error(&other, StatusCode::NOT_FOUND, "not_found");
    let unknown = get(&app, &format!("/orders/{UNKNOWN_ORDER}"), Some(ADMIN_TOKEN)).await;
    assert_error(&unknown, StatusCode::NOT_FOUND, "not_found");
    for bad in ["abc", "0", "0042", "9223372036854775808"] {
        let answer = get(&app, &format!("/orders/{bad}"), Some(ADMIN_TOKEN)).await;
        assert_error(&answer, StatusCode::BAD_REQUEST, "bad_request");
    }
}

#[tokio::test]
async fn purchases_outside_the_window_are_refused() {
    let app = App::start().await;
    let upcoming = app.voucher(3, 3600, 7200).await;
    let ended = app.voucher(3, -7200, -3600).await;
    assert_refused(&app, upcoming, 21, "not_started").await;
    assert_refused(&app, ended, 21, "ended").await;
}

#[tokio::test]
async fn sold_out_and_repeat_purchases_are_refused() {
    let app = App::start().await;
    let (voucher, order) = sale_with_order(&app, 1, 31).await;
    assert_refused(&app, voucher, 32, "sold_out").await;
    // The repeat names the order the buyer already has.
    let again = assert_refused(&app, voucher, 31, "already_ordered").await;
    assert_eq!(again.order_id(), Some(order), "{again:?}");
    read(voucher).await.assert_sound(&[(order, 31)]);
}

/// A purchase of a voucher that does not exist is `404` and leaves no sale state. An id
/// above the highest MySQL handed out does not exist, which Redis tells alone; below it,
/// MySQL is asked (here of a voucher deleted after its creation taught Redis its id), and
/// its answer is kept.
#[tokio::test]
async fn buying_an_unknown_voucher_is_not_found_and_creates_no_sale_state() {
    let app = App::start().await;
    let mut redis = redis().await;
    let deleted = app.live_voucher(1).await;
    let sale = driver(deleted).await;
    sale.call(&Forget {
        voucher_id: sale.voucher,
    })
    .await
    .unwrap();
    sale.call(&Unlist {
        voucher_id: sale.voucher,
    })
    .await
    .unwrap();
    mysql_exec(sql::DELETE_VOUCHER, (deleted,)).await;

    // One request a second asks MySQL, for any voucher and route: a press that finds
    // another test's request asking hears 503, and presses again.
    let mut answer = app.buy(deleted, 41).await;
    for _ in 0..3 {
        if answer.status != StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1100)).await;
        answer = app.buy(deleted, 41).await;
    }
    assert_error(&answer, StatusCode::NOT_FOUND, "not_found");
    let keys = sale.keys();
    for key in [keys.voucher(), keys.buyers(), keys.queue(), keys.lease()] {
        let exists: bool = redis.exists(&key).await.unwrap();
        assert!(!exists, "{key} was created");
    }
    // MySQL's answer is kept: the next purchase is told from Redis alone, even while
    // the probe of this second is taken.
    let absent: bool = redis.exists(keys.absent()).await.unwrap();
    assert!(absent, "MySQL's answer was not kept");
    let again = app.buy(deleted, 42).await;
    assert_error(&again, StatusCode::NOT_FOUND, "not_found");

    // A made-up id is above every id MySQL handed out: not found, MySQL never asked.
    let made_up = fresh_voucher_id();
    let answer = app.buy(made_up, 41).await;
    assert_error(&answer, StatusCode::NOT_FOUND, "not_found");
    let keys = sale_keys(made_up);
    for key in [
        keys.voucher(),
        keys.buyers(),
        keys.queue(),
        keys.lease(),
        keys.absent(),
    ] {
        let exists: bool = redis.exists(&key).await.unwrap();
        assert!(!exists, "{key} was created");
    }
}

#[tokio::test]
async fn a_sync_waits_for_the_one_in_progress() {
    let app = App::start().await;
    let voucher = app.live_voucher(2).await;
    // Another sync holds the voucher's lease.
    let lease = sale_keys(voucher).sync_lease();
    let _: () = redis().await.set(&lease, "other").await.unwrap();
    let busy = sync(&app, voucher, ADMIN_TOKEN).await;
    assert_error(&busy, StatusCode::CONFLICT, "sync_in_progress");
    assert_eq!(redis_hash(sale_keys(voucher).voucher()).await["stock"], "2");
    // Once it is over (or its lease lapsed), the sync runs.
    let _: () = redis().await.del(&lease).await.unwrap();
    let done = sync(&app, voucher, ADMIN_TOKEN).await;
    assert_voucher(&done, StatusCode::OK, voucher);
    let left: bool = redis().await.exists(&lease).await.unwrap();
    assert!(!left, "the sync left its lease behind");
}

#[tokio::test]
async fn sync_restores_the_sale_state_redis_lost() {
    let app = App::start().await;
    let (buyer, newcomer) = (51, 52);
    let (voucher, order) = sale_with_order(&app, 5, buyer).await;
    let mut redis = redis().await;
    let keys = sale_keys(voucher);
    let lost = [keys.voucher(), keys.buyers(), keys.queue()];
    let _: () = redis.del(&lost).await.unwrap();

    // Without its sale state the voucher is not sold, whoever asks.
    for user in [newcomer, buyer] {
        let answer = app.buy(voucher, user).await;
        assert_error(&answer, StatusCode::SERVICE_UNAVAILABLE, "unavailable");
        assert_eq!(
            answer.body["message"],
            "service temporarily unavailable: sale state not loaded"
        );
    }
    assert_error(
        &sync(&app, voucher, &buyer_token(buyer)).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    let unknown = fresh_voucher_id();
    assert_error(
        &sync(&app, unknown, ADMIN_TOKEN).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let record = read(voucher).await;
    assert_eq!(
        (record.orders.len(), record.mysql_stock, record.redis_stock),
        (1, 4, None)
    );

    let synced = sync(&app, voucher, ADMIN_TOKEN).await;
    let view = assert_voucher(&synced, StatusCode::OK, voucher);
    assert_eq!(
        (view["remaining"].as_u64(), view["status"].as_str()),
        (Some(4), Some("live"))
    );
    let read_back = get(&app, &format!("/vouchers/{voucher}"), None).await;
    assert_eq!(assert_voucher(&read_back, StatusCode::OK, voucher), view);
    let (.., begin, end) = voucher_row(voucher).await;
    let state = redis_hash(sale_keys(voucher).voucher()).await;
    assert_eq!(state["stock"], "4");
    assert_eq!(state["begin_ms"], (begin * 1000).to_string());
    assert_eq!(state["end_ms"], (end * 1000).to_string());
    let buyers = redis_hash(sale_keys(voucher).buyers()).await;
    assert_eq!(
        buyers,
        HashMap::from([(buyer.to_string(), format!("o:{order}"))])
    );

    // Sales resume where MySQL left them.
    let again = app.buy(voucher, buyer).await;
    assert_error(&again, StatusCode::CONFLICT, "already_ordered");
    assert_eq!(again.order_id(), Some(order));
    let second = assert_receipt(&app.buy(voucher, newcomer).await, voucher, newcomer);
    let record = read(voucher).await;
    record.assert_settled(&[(order, buyer), (second, newcomer)]);
}

/// A voucher whose sale state Redis lost, bought by 30 buyers at once: each hears 503
/// "sale state not loaded" and MySQL is asked whether the voucher exists by at most one
/// request a second, through the probe key (`SET NX PX 1000`). MySQL is reached through
/// a counting proxy. Bound: every successful probe holds the key for 1000 ms, so a burst
/// lasting `d` opens at most 1 + floor(d / 1 s) connections: one for a burst under a
/// second (as measured, a few tens of ms), two only if it lasts past the first probe's
/// second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purchases_of_a_voucher_redis_lost_ask_mysql_at_most_once_a_second() {
    const BUYERS: u64 = 30;
    let (proxy, _manifest, app) = behind_proxy(REDIS_PORT).await;
    let app = Arc::new(app);
    let voucher = app.live_voucher(5).await;
    let sale = driver(voucher).await;
    sale.lose(&[sale.keys().voucher()]).await;
    let before = snapshot(&sale).await;
    assert_eq!(
        (before.sale.redis_stock, before.sale.mysql_stock),
        (None, 5)
    );
    let stats = proxy.stats();
    let connections = stats.forwarded.load(Ordering::SeqCst);

    let started = Instant::now();
    let mut burst = JoinSet::new();
    for user in 1..=BUYERS {
        let app = app.clone();
        burst.spawn(async move { (user, app.buy(voucher, user).await) });
    }
    let answers = burst.join_all().await;
    let took = started.elapsed();
    let opened = stats.forwarded.load(Ordering::SeqCst) - connections;

    assert_eq!(answers.len() as u64, BUYERS);
    for (user, answer) in &answers {
        assert_error(answer, StatusCode::SERVICE_UNAVAILABLE, "unavailable");
        assert_eq!(
            answer.body["message"], "service temporarily unavailable: sale state not loaded",
            "buyer {user}"
        );
    }
    let bound = 1 + took.as_millis() as u64 / 1000;
    println!("{BUYERS} purchases of a voucher with no sale state in {took:?}: {opened} MySQL connections");
    assert!(
        opened <= bound,
        "{opened} MySQL connections for {BUYERS} purchases in {took:?}"
    );
    assert_eq!(
        snapshot(&sale).await,
        before,
        "a refused purchase changed the sale"
    );
}

/// The voucher's sale state through the component's own scripts (`lua/`), on the shared
/// Redis the component uses.
async fn driver(voucher: u64) -> Sale {
    Sale {
        conn: redis().await,
        voucher: BucketId::from_raw(voucher),
    }
}

/// All of a sale both stores hold, the queue and its lease included.
#[derive(Debug, PartialEq)]
struct Snapshot {
    sale: SaleRecord,
    buyers: HashMap<String, String>,
    queue: Vec<Entry>,
    lease: Option<String>,
}

async fn snapshot(sale: &Sale) -> Snapshot {
    Snapshot {
        sale: read(sale.voucher.raw()).await,
        buyers: redis_hash(sale.keys().buyers()).await,
        queue: sale.queue().await,
        lease: sale.lease().await,
    }
}

/// A buyer whose purchase is queued (admitted, not yet in MySQL) while another request
/// holds the voucher's lease hears `busy` with `Retry-After: 1`, and her press changes
/// nothing. Once another buyer's request drains the queue, her next press names the
/// order her queued purchase became.
#[tokio::test]
async fn a_buyer_whose_purchase_is_queued_is_busy_until_it_is_committed() {
    let app = App::start().await;
    let voucher = app.live_voucher(3).await;
    let (buyer, other) = (61, 62);
    let sale = driver(voucher).await;
    // A drainer that stalled holds the lease; the admission of her purchase (the
    // component's own script) leaves it queued behind it.
    let _: () = redis()
        .await
        .set(sale.keys().lease(), "stalled")
        .await
        .unwrap();
    let admitted = sale.admit(UserId::from_raw(buyer)).await;
    assert_eq!(admitted.lease, None, "{admitted:?}");
    let Decision::Admitted(ticket) = admitted.decision else {
        panic!("not admitted: {admitted:?}");
    };
    let entry = Entry {
        user: UserId::from_raw(buyer),
        ticket,
    };
    let order_id = ticket.order_id().unwrap();
    let order = order_id.raw();
    let before = snapshot(&sale).await;
    assert_eq!(before.queue, [entry]);
    assert_eq!(before.lease.as_deref(), Some("stalled"));
    assert_eq!(
        (before.sale.redis_stock, before.sale.mysql_stock),
        (Some(2), 3)
    );

    for _ in 0..2 {
        let busy = app.buy(voucher, buyer).await;
        assert_error(&busy, StatusCode::TOO_MANY_REQUESTS, "busy");
        assert_eq!(busy.headers["retry-after"], "1", "{busy:?}");
        assert_eq!(
            snapshot(&sale).await,
            before,
            "a busy answer changed the sale"
        );
    }

    // The lease lapses (deleted here, as its TTL would): the next buyer's request takes
    // it and commits both queued purchases, oldest first, in one batch.
    sale.expire_lease().await;
    let second = assert_receipt(&app.buy(voucher, other).await, voucher, other);
    sale.drained().await;
    assert_eq!(
        sale.news(entry).await,
        [outcome(Verdict::Ordered, order_id)]
    );
    assert_eq!(sale.lease().await, None);
    for _ in 0..2 {
        let again = app.buy(voucher, buyer).await;
        assert_error(&again, StatusCode::CONFLICT, "already_ordered");
        assert_eq!(again.order_id(), Some(order), "{again:?}");
    }
    let record = read(voucher).await;
    assert_eq!(
        record.orders,
        HashMap::from([(order, buyer), (second, other)])
    );
    record.assert_settled(&[(second, other)]);
}

/// A purchase admitted with no request left to see it through (its request died after
/// admission, and its lease lapsed) is committed by the next purchase request of the
/// voucher, whoever makes it and whatever she is told: here another buyer's, told
/// `sold_out`. The buyer then hears `already_ordered` with the order her purchase became.
#[tokio::test]
async fn a_purchase_left_queued_is_committed_by_the_next_request_even_a_sold_out_one() {
    let app = App::start().await;
    let voucher = app.live_voucher(1).await;
    let sale = driver(voucher).await;
    let admitted = sale.admit(UserId::from_raw(71)).await;
    let Decision::Admitted(ticket) = admitted.decision else {
        panic!("not admitted: {admitted:?}");
    };
    let order_id = ticket.order_id().unwrap();
    let order = order_id.raw();
    sale.expire_lease().await;
    let before = read(voucher).await;
    assert_eq!(before.orders, HashMap::new());
    assert_eq!(
        (before.redis_stock, before.redis_queued, before.mysql_stock),
        (Some(0), 1, 1)
    );

    assert_error(
        &app.buy(voucher, 72).await,
        StatusCode::CONFLICT,
        "sold_out",
    );
    let record = read(voucher).await;
    assert_eq!(record.orders, HashMap::from([(order, 71)]));
    assert_eq!(
        sale.record(UserId::from_raw(71)).await,
        Some(Record::Ordered(order_id, 1))
    );
    assert_eq!(sale.record(UserId::from_raw(72)).await, None);
    assert_eq!(sale.lease().await, None);
    for _ in 0..2 {
        let again = app.buy(voucher, 71).await;
        assert_error(&again, StatusCode::CONFLICT, "already_ordered");
        assert_eq!(again.order_id(), Some(order), "{again:?}");
    }
    assert_refused(&app, voucher, 72, "sold_out").await;
    let record = read(voucher).await;
    record.assert_settled(&[]);
}

/// The end of the sale closes it to new buyers only: a buyer who holds an order and
/// presses after `end_time` (by the real clock) hears `already_ordered` with her order
/// id, a newcomer hears `ended`, and neither changes anything.
#[tokio::test]
async fn a_buyer_with_an_order_hears_it_after_the_sale_ends() {
    let app = App::start().await;
    // Times are stored to the second: the sale ends 2 to 3 s from now.
    let voucher = app.voucher(5, -60, 3).await;
    let (buyer, newcomer) = (95, 96);
    let order = assert_receipt(&app.buy(voucher, buyer).await, voucher, buyer);
    let sale = driver(voucher).await;
    let end_ms: i64 = redis_hash(sale_keys(voucher).voucher()).await["end_ms"]
        .parse()
        .unwrap();
    // The one wait: for Redis's clock, which admission reads, to pass the end.
    loop {
        let now = sale.now_ms().await;
        if now >= end_ms {
            break;
        }
        tokio::time::sleep(Duration::from_millis((end_ms - now) as u64 + 5)).await;
    }
    for _ in 0..2 {
        let again = assert_refused(&app, voucher, buyer, "already_ordered").await;
        assert_eq!(again.order_id(), Some(order), "{again:?}");
    }
    assert_refused(&app, voucher, newcomer, "ended").await;
    let record = read(voucher).await;
    record.assert_settled(&[(order, buyer)]);
}

#[tokio::test]
async fn purchases_survive_redis_forgetting_its_scripts() {
    let app = App::start().await;
    let voucher = app.live_voucher(5).await;
    let mut acknowledged = Vec::new();
    // The first purchase after the flush falls back to EVAL; the next finds the script
    // cached again (or falls back again, if another test flushed in between).
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut redis().await)
        .await
        .unwrap();
    for user in [71, 72] {
        let order = assert_receipt(&app.buy(voucher, user).await, voucher, user);
        acknowledged.push((order, user));
    }
    let record = read(voucher).await;
    record.assert_settled(&acknowledged);
    assert_eq!(record.orders.len(), 2);
}

// ---- authentication -----------------------------------------------------------------

/// Authorization headers that must all be refused with 401.
fn unauthorized_headers() -> Vec<(&'static str, Option<String>)> {
    let good = buyer_token(81);
    let payload = good.split('.').nth(1).unwrap();
    vec![
        ("no token", None),
        ("empty bearer", Some("Bearer ".into())),
        ("not bearer", Some(format!("Basic {good}"))),
        ("garbage", Some("Bearer not.a.jwt".into())),
        (
            "wrong secret",
            Some(format!(
                "Bearer {}",
                signed_token("another-secret", json!({"sub": "81"}), Some(600))
            )),
        ),
        (
            "alg none",
            Some(format!("Bearer {ALG_NONE_HEADER}.{payload}.")),
        ),
        (
            "expired",
            Some(format!(
                "Bearer {}",
                signed_token(JWT_SECRET, json!({"sub": "81"}), Some(-60))
            )),
        ),
        (
            "no exp",
            Some(format!(
                "Bearer {}",
                signed_token(JWT_SECRET, json!({"sub": "81"}), None)
            )),
        ),
        (
            "admin token prefix",
            Some(format!("Bearer {}", &ADMIN_TOKEN[1..])),
        ),
    ]
}

#[tokio::test]
async fn bad_credentials_are_unauthorized_and_change_nothing() {
    let app = App::start().await;
    let (voucher, order) = sale_with_order(&app, 5, 81).await;
    let before = read(voucher).await;
    let tag = marker("unauthorized");
    let body = new_voucher(&tag).to_string();
    let routes = [
        (Method::POST, "/vouchers".to_string(), body),
        (
            Method::POST,
            format!("/vouchers/{voucher}/orders"),
            String::new(),
        ),
        (
            Method::POST,
            format!("/vouchers/{voucher}/sync"),
            String::new(),
        ),
        (Method::GET, format!("/orders/{order}"), String::new()),
    ];
    for (label, header) in unauthorized_headers() {
        for (method, path, body) in &routes {
            let answer = send_raw(
                &app,
                method.clone(),
                path,
                header.as_deref(),
                Some("application/json"),
                body.clone(),
            )
            .await;
            assert_eq!(
                answer.status,
                StatusCode::UNAUTHORIZED,
                "{label}: {method} {path}"
            );
            assert_error(&answer, StatusCode::UNAUTHORIZED, "unauthorized");
        }
    }
    assert_eq!(vouchers_marked(&tag).await, 0);
    assert_eq!(read(voucher).await, before);
}

#[tokio::test]
async fn each_role_is_kept_to_its_routes() {
    let app = App::start().await;
    let voucher = app.live_voucher(5).await;
    let before = read(voucher).await;
    let tag = marker("forbidden");
    let buyer = buyer_token(91);

    let create = app
        .call(
            Method::POST,
            "/vouchers",
            Some(&buyer),
            Some(new_voucher(&tag)),
        )
        .await;
    assert_error(&create, StatusCode::FORBIDDEN, "forbidden");
    assert_error(
        &sync(&app, voucher, &buyer).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    let path = format!("/vouchers/{voucher}/orders");
    let admin_buys = app.post(&path, ADMIN_TOKEN).await;
    assert_error(&admin_buys, StatusCode::FORBIDDEN, "forbidden");

    assert_eq!(vouchers_marked(&tag).await, 0);
    assert_eq!(read(voucher).await, before);
}

// ---- the HTTP edge ------------------------------------------------------------------

/// A valid create-voucher body padded with trailing spaces (still valid JSON) to `len`.
fn padded_voucher(marker: &str, len: usize) -> String {
    let body = new_voucher(marker).to_string();
    assert!(body.len() <= len);
    format!("{body}{}", " ".repeat(len - body.len()))
}

#[tokio::test]
async fn bodies_over_16_kib_are_refused_before_anything_is_done() {
    let app = App::start().await;
    let admin = format!("Bearer {ADMIN_TOKEN}");
    let json = Some("application/json");

    let at_limit = marker("at-limit");
    let body = padded_voucher(&at_limit, MAX_BODY_BYTES);
    let answer = send_raw(&app, Method::POST, "/vouchers", Some(&admin), json, body).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
    assert_eq!(vouchers_marked(&at_limit).await, 1);

    let over = marker("over-limit");
    let body = padded_voucher(&over, MAX_BODY_BYTES + 1);
    let answer = send_raw(&app, Method::POST, "/vouchers", Some(&admin), json, body).await;
    assert_error(&answer, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    assert_eq!(vouchers_marked(&over).await, 0);
}

#[tokio::test]
async fn unknown_routes_are_json_not_found() {
    let app = App::start().await;
    for path in [
        "/",
        "/nope",
        "/health/",
        "/vouchers/1/",
        "/vouchers/1/orders/2",
        "/orders",
    ] {
        let answer = get(&app, path, Some(ADMIN_TOKEN)).await;
        assert_error(&answer, StatusCode::NOT_FOUND, "not_found");
    }
}

#[tokio::test]
async fn wrong_methods_are_refused_with_allow() {
    let app = App::start().await;
    let cases = [
        (Method::POST, "/health", "GET"),
        (Method::DELETE, "/vouchers", "GET, POST"),
        (Method::DELETE, "/vouchers/1", "GET, PATCH"),
        (Method::PUT, "/vouchers/1/orders", "GET, POST"),
        (Method::PUT, "/vouchers/1/sync", "POST"),
        (Method::POST, "/orders/1", "GET"),
    ];
    for (method, path, allow) in cases {
        let answer = app
            .call(method.clone(), path, Some(ADMIN_TOKEN), None)
            .await;
        assert_error(
            &answer,
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        );
        let allowed = answer.headers.get("allow").map(|v| v.to_str().unwrap());
        assert_eq!(allowed, Some(allow), "{method} {path}");
    }
}
