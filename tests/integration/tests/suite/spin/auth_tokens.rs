//! The optional token settings, under real Spin: `metrics_token`, a bearer token that
//! opens `GET /metrics` and nothing else (so that Prometheus need not hold the admin
//! token), and `jwt_issuer` / `jwt_audience`, the `iss` and `aud` a buyer's JWT must carry
//! once they are set. Left empty (spin.toml's defaults), neither changes anything.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use seckill_tests::drivers::app::{
    buyer_token, manifest, signed_token, Answer, App, ADMIN_TOKEN, JWT_SECRET,
};
use seckill_tests::drivers::invariants::read;

use super::shared::vouchers_where;

const METRICS_TOKEN: &str = "integration-test-metrics-token";
const ISSUER: &str = "https://login.shop.test";
const AUDIENCE: &str = "seckill";

async fn start(env: &[(&str, &str)]) -> App {
    let env = env
        .iter()
        .map(|(name, value)| (format!("SPIN_VARIABLE_{name}"), value.to_string()))
        .collect();
    App::start_with(manifest(), env).await
}

/// A buyer token signed with the right secret over `claims`, expiring in ten minutes.
fn signed(claims: Value) -> String {
    signed_token(JWT_SECRET, claims, Some(600))
}

fn assert_refused(answer: &Answer, status: StatusCode, what: &str) {
    let error = if status == StatusCode::UNAUTHORIZED {
        "unauthorized"
    } else {
        "forbidden"
    };
    assert_eq!(
        (answer.status, answer.error()),
        (status, error),
        "{what}: {answer:?}"
    );
}

/// How many vouchers MySQL holds under `title`.
async fn vouchers_titled(title: &str) -> u64 {
    vouchers_where("title = ?", (title,)).await
}

#[tokio::test]
async fn the_metrics_token_scrapes_metrics_and_can_do_nothing_else() {
    let app = start(&[("METRICS_TOKEN", METRICS_TOKEN)]).await;
    let voucher = app.live_voucher(2).await;

    let scraped = app.get("/metrics", METRICS_TOKEN).await;
    assert_eq!(scraped.status, StatusCode::OK, "{scraped:?}");
    let body = scraped.body.as_str().expect("the text exposition");
    assert!(
        body.contains(&format!(
            "seckill_voucher_units_left{{voucher_id=\"{voucher}\"}} 2"
        )),
        "voucher {voucher}'s two units:\n{body}"
    );
    // The admin token still scrapes; a near miss and a buyer do not, as before.
    let admin = app.get("/metrics", ADMIN_TOKEN).await;
    assert_eq!(admin.status, StatusCode::OK, "{admin:?}");
    let near_miss = format!("{METRICS_TOKEN}x");
    for (token, status) in [
        (near_miss.as_str(), StatusCode::UNAUTHORIZED),
        (&METRICS_TOKEN[1..], StatusCode::UNAUTHORIZED),
        (buyer_token(9_300_001).as_str(), StatusCode::FORBIDDEN),
    ] {
        let answer = app.get("/metrics", token).await;
        assert_refused(&answer, status, &format!("GET /metrics with {token:?}"));
    }

    // Anywhere else it is an unknown token: 401, and nothing changes.
    let title = format!("made with the metrics token {}", std::process::id());
    let body = json!({
        "title": title,
        "stock": 1,
        "begin_time": "2026-01-01T00:00:00Z",
        "end_time": "2036-01-01T00:00:00Z",
    });
    let attempts = [
        (Method::POST, "/vouchers".to_string(), Some(body)),
        (Method::POST, format!("/vouchers/{voucher}/orders"), None),
        (
            Method::GET,
            format!("/vouchers/{voucher}/orders/mine"),
            None,
        ),
        (Method::POST, format!("/vouchers/{voucher}/sync"), None),
        (Method::GET, "/orders/1".to_string(), None),
    ];
    for (method, path, body) in attempts {
        let what = format!("{method} {path} with the metrics token");
        let answer = app.call(method, &path, Some(METRICS_TOKEN), body).await;
        assert_refused(&answer, StatusCode::UNAUTHORIZED, &what);
    }
    assert_eq!(vouchers_titled(&title).await, 0, "no voucher was created");
    let sale = read(voucher).await;
    assert!(sale.orders.is_empty(), "{sale:?}");
    assert_eq!(
        (sale.redis_stock, sale.mysql_stock),
        (Some(2), 2),
        "{sale:?}"
    );
}

#[tokio::test]
async fn issuer_and_audience_once_set_are_required_of_every_buyer() {
    let app = start(&[("JWT_ISSUER", ISSUER), ("JWT_AUDIENCE", AUDIENCE)]).await;
    let voucher = app.live_voucher(1).await;
    let buyer = 9_300_101_u64;
    let sub = buyer.to_string();
    let refused = [
        ("neither", json!({"sub": sub})),
        ("no iss", json!({"sub": sub, "aud": AUDIENCE})),
        ("no aud", json!({"sub": sub, "iss": ISSUER})),
        (
            "another iss",
            json!({"sub": sub, "iss": "https://evil.test", "aud": AUDIENCE}),
        ),
        (
            "another aud",
            json!({"sub": sub, "iss": ISSUER, "aud": "another-service"}),
        ),
        (
            "aud an array without it",
            json!({"sub": sub, "iss": ISSUER, "aud": ["another-service"]}),
        ),
        (
            "iss and aud swapped",
            json!({"sub": sub, "iss": AUDIENCE, "aud": ISSUER}),
        ),
        (
            "iss in another case",
            json!({"sub": sub, "iss": ISSUER.to_uppercase(), "aud": AUDIENCE}),
        ),
    ];
    let orders = format!("/vouchers/{voucher}/orders");
    let mine = format!("{orders}/mine");
    for (what, claims) in refused {
        let token = signed(claims);
        for (method, path) in [(Method::POST, &orders), (Method::GET, &mine)] {
            let answer = app.call(method.clone(), path, Some(&token), None).await;
            assert_refused(
                &answer,
                StatusCode::UNAUTHORIZED,
                &format!("{what}: {method} {path}"),
            );
        }
    }
    assert!(read(voucher).await.orders.is_empty(), "nothing was bought");

    // The right iss and aud: aud as a string, or in an array.
    let token = signed(json!({"sub": sub, "iss": ISSUER, "aud": AUDIENCE}));
    let none_yet = app.get(&mine, &token).await;
    assert_eq!(
        (none_yet.status, none_yet.error()),
        (StatusCode::NOT_FOUND, "not_found"),
        "authenticated, with no order yet: {none_yet:?}"
    );
    let receipt = app.post(&orders, &token).await;
    assert_eq!(receipt.status, StatusCode::CREATED, "{receipt:?}");
    assert_eq!(receipt.body["user_id"], json!(sub), "{receipt:?}");
    let order = receipt.order_id().expect("an order id");

    let other = 9_300_102_u64;
    let in_array = signed(json!({
        "sub": other.to_string(),
        "iss": ISSUER,
        "aud": ["cdn.shop.test", AUDIENCE],
    }));
    let sold_out = app.post(&orders, &in_array).await;
    assert_eq!(
        (sold_out.status, sold_out.error()),
        (StatusCode::CONFLICT, "sold_out"),
        "authenticated, and the one unit is gone: {sold_out:?}"
    );

    // The admin token is no JWT: the settings do not touch it.
    let admin = app.get(&format!("/orders/{order}"), ADMIN_TOKEN).await;
    assert_eq!(admin.status, StatusCode::OK, "{admin:?}");

    let sale = read(voucher).await;
    assert_eq!(
        sale.orders,
        [(order, buyer)].into_iter().collect(),
        "the one order is the right token's"
    );
}

#[tokio::test]
async fn left_empty_neither_setting_changes_anything() {
    // spin.toml's defaults: no metrics token, no iss or aud check.
    let app = App::start().await;
    for token in [METRICS_TOKEN, ""] {
        let answer = app.get("/metrics", token).await;
        assert_refused(
            &answer,
            StatusCode::UNAUTHORIZED,
            &format!("GET /metrics with {token:?} and no metrics token set"),
        );
    }
    let voucher = app.live_voucher(1).await;
    // Any iss and aud, of any type, or none, as before.
    for (user, claims) in [
        (
            9_300_201_u64,
            json!({"iss": "https://anyone.test", "aud": ["x"]}),
        ),
        (9_300_202, json!({"iss": 5, "aud": {"a": 1}})),
        (9_300_203, json!({})),
    ] {
        let mut claims = claims;
        claims["sub"] = json!(user.to_string());
        let token = signed(claims.clone());
        let path = format!("/vouchers/{voucher}/orders/mine");
        let answer = app.get(&path, &token).await;
        assert_eq!(
            (answer.status, answer.error()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{claims}: {answer:?}"
        );
    }
}

#[tokio::test]
async fn a_buyer_token_valid_beyond_the_max_lifetime_is_refused() {
    let app = start(&[("JWT_MAX_LIFETIME_S", "3600")]).await;
    let voucher = app.live_voucher(5).await;
    let path = format!("/vouchers/{voucher}/orders");
    for exp_in in [7_200, 10 * 365 * 86_400] {
        let token = signed_token(JWT_SECRET, json!({"sub": "61"}), Some(exp_in));
        let answer = app.post(&path, &token).await;
        assert_refused(
            &answer,
            StatusCode::UNAUTHORIZED,
            &format!("exp in {exp_in} s"),
        );
    }
    let within = signed_token(JWT_SECRET, json!({"sub": "61"}), Some(3_500));
    let answer = app.post(&path, &within).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
}

#[tokio::test]
async fn a_jwt_secret_shorter_than_32_bytes_serves_nothing_and_says_why() {
    let app = start(&[("JWT_SECRET", "only-twenty-six-bytes-long")]).await;
    let answer = app.call(Method::GET, "/vouchers/1", None, None).await;
    assert_eq!(
        (answer.status, answer.error()),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        "{answer:?}"
    );
    // Spin writes the log as the component prints, after the answer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !app.request_log().contains('\n') && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let log = app.request_log();
    assert!(
        log.contains("jwt_secret must be at least 32 bytes"),
        "{log}"
    );
}
