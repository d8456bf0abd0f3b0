//! The request log under real Spin: exactly one well-formed JSON line per request, with
//! the server's id for it (echoed in `X-Request-Id`), the client's apart, route, voucher, buyer, status and outcome; a
//! failure's cause on one line; and no token or secret anywhere in it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use reqwest::Method;
use seckill_tests::drivers::app::{buyer_token, App, ADMIN_TOKEN, JWT_SECRET};
use seckill_tests::servers::faults::{backend_env, free_port, Manifest};
use serde_json::{json, Value};

use super::shared::create_voucher;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// One request the test makes, and the line it expects for it.
struct Case {
    method: Method,
    path: String,
    token: Option<String>,
    /// The `X-Request-Id` sent; `None` sends none.
    request_id: Option<&'static str>,
    traceparent: bool,
    /// Expected: route, voucher id, user id, status, outcome.
    route: &'static str,
    voucher_id: Option<u64>,
    user_id: Option<u64>,
    status: u16,
    outcome: &'static str,
}

/// Sends `case`; returns the request id the component answered with.
async fn send(app: &App, case: &Case) -> String {
    let mut request = app
        .client
        .request(case.method.clone(), format!("{}{}", app.base, case.path));
    if let Some(token) = &case.token {
        request = request.bearer_auth(token);
    }
    if let Some(id) = case.request_id {
        request = request.header("x-request-id", id);
    }
    if case.traceparent {
        request = request.header("traceparent", format!("00-{TRACE_ID}-00f067aa0ba902b7-01"));
    }
    let response = request.send().await.unwrap();
    assert_eq!(
        response.status().as_u16(),
        case.status,
        "{} {}",
        case.method,
        case.path
    );
    let id = response.headers()["x-request-id"].to_str().unwrap();
    id.to_string()
}

/// The log's lines once it holds `count` of them (Spin writes the file as the
/// component prints).
async fn lines(app: &App, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = app.request_log();
        let lines: Vec<&str> = log.lines().collect();
        if lines.len() >= count || Instant::now() > deadline {
            return lines
                .iter()
                .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn every_request_writes_exactly_one_line_with_its_outcome() {
    let app = App::start().await;
    let voucher = app.live_voucher(2).await;
    let (a, b, c) = (5101, 5102, 5103);
    let orders = format!("/vouchers/{voucher}/orders");
    let case = |method: Method, path: &str, token: Option<String>, id: &'static str| Case {
        method,
        path: path.to_string(),
        token,
        request_id: Some(id),
        traceparent: false,
        route: "",
        voucher_id: None,
        user_id: None,
        status: 0,
        outcome: "",
    };
    let buy = |user: u64, id| case(Method::POST, &orders, Some(buyer_token(user)), id);
    let admin = Some(ADMIN_TOKEN.to_string());
    let expect = |case: Case, route, voucher_id, user_id, status, outcome| Case {
        route,
        voucher_id,
        user_id,
        status,
        outcome,
        ..case
    };
    let health = |id| {
        expect(
            case(Method::GET, "/health", None, id),
            "/health",
            None,
            None,
            200,
            "ok",
        )
    };
    let orders_route = "/vouchers/{id}/orders";
    let v = Some(voucher);
    let mut cases = vec![
        expect(buy(a, "r-a"), orders_route, v, Some(a), 201, "ordered"),
        expect(
            buy(a, "r-a-again"),
            orders_route,
            v,
            Some(a),
            409,
            "already_ordered",
        ),
        expect(buy(b, "r-b"), orders_route, v, Some(b), 201, "ordered"),
        expect(buy(c, "r-c"), orders_route, v, Some(c), 409, "sold_out"),
        expect(
            case(Method::POST, &orders, None, "r-anonymous"),
            orders_route,
            None,
            None,
            401,
            "unauthorized",
        ),
        expect(
            case(Method::GET, &format!("/vouchers/{voucher}"), None, "r-get"),
            "/vouchers/{id}",
            v,
            None,
            200,
            "found",
        ),
        expect(
            case(Method::GET, "/vouchers/x1", None, "r-bad-id"),
            "/vouchers/{id}",
            None,
            None,
            400,
            "bad_request",
        ),
        expect(
            case(Method::GET, "/nope", None, "r-nope"),
            "unmatched",
            None,
            None,
            404,
            "not_found",
        ),
        expect(
            case(Method::DELETE, "/health", None, "r-method"),
            "/health",
            None,
            None,
            405,
            "method_not_allowed",
        ),
        expect(
            case(Method::GET, "/metrics", admin.clone(), "r-metrics"),
            "/metrics",
            None,
            None,
            200,
            "ok",
        ),
        expect(
            case(
                Method::GET,
                "/metrics",
                Some(buyer_token(a)),
                "r-metrics-buyer",
            ),
            "/metrics",
            None,
            Some(a),
            403,
            "forbidden",
        ),
    ];
    // No X-Request-Id: the trace id of the traceparent names the request.
    cases.push(Case {
        request_id: None,
        traceparent: true,
        ..health("")
    });
    // Another client naming its request as buyer a's did names only its own: the server's
    // id is not hers.
    cases.push(health("r-a"));
    // An X-Request-Id that could break a log line is not logged.
    cases.push(health("two words"));

    let mut answered = Vec::new();
    for case in &cases {
        answered.push(send(&app, case).await);
    }
    // The voucher's creation is logged too.
    let lines = lines(&app, cases.len() + 1).await;
    assert_eq!(lines.len(), cases.len() + 1, "{lines:#?}");

    let ids: BTreeSet<&str> = lines
        .iter()
        .map(|line| line["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), lines.len(), "request ids repeat");
    for (case, id) in cases.iter().zip(&answered) {
        // The server's own id, whatever the client sent.
        assert_eq!(id.len(), 32, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        let matching: Vec<&Value> = lines.iter().filter(|l| l["request_id"] == *id).collect();
        assert_eq!(matching.len(), 1, "{id}: {lines:#?}");
        let line = matching[0];
        let mut expected = json!({
            "request_id": id,
            "method": case.method.as_str(),
            "route": case.route,
            "status": case.status,
            "outcome": case.outcome,
        });
        if let Some(voucher) = case.voucher_id {
            expected["voucher_id"] = json!(voucher);
        }
        if let Some(user) = case.user_id {
            expected["user_id"] = json!(user.to_string());
        }
        if case.traceparent {
            expected["trace_id"] = json!(TRACE_ID);
        }
        if let Some(sent) = case.request_id.filter(|sent| *sent != "two words") {
            expected["client_request_id"] = json!(sent);
        }
        let mut fields = line.as_object().unwrap().clone();
        let ts = fields.remove("ts").unwrap();
        assert!(
            chrono::DateTime::parse_from_rfc3339(ts.as_str().unwrap()).is_ok(),
            "{ts}"
        );
        assert!(fields.remove("latency_us").unwrap().is_u64(), "{line}");
        // A client error says why in its outcome; no cause is noted for it.
        assert_eq!(Value::Object(fields), expected, "{id}");
    }

    let log = app.request_log();
    for secret in [ADMIN_TOKEN, JWT_SECRET, &buyer_token(a), &buyer_token(b)] {
        assert!(!log.contains(secret), "the log holds a secret");
    }
}

#[tokio::test]
async fn a_failure_names_its_cause_on_one_line() {
    // MySQL is a port nobody listens on.
    let dead = free_port();
    let manifest = Manifest::with_absolute_paths();
    let app = App::start_with(manifest.path(), backend_env(6379, dead)).await;
    let answer = create_voucher(&app, "t", "2026-01-01T00:00:00Z", "2036-01-01T00:00:00Z").await;
    assert_eq!(answer.status.as_u16(), 503, "{answer:?}");

    let lines = lines(&app, 1).await;
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let line = &lines[0];
    assert_eq!(line["route"], "/vouchers");
    assert_eq!(line["outcome"], "unavailable");
    let cause = line["cause"].as_str().unwrap();
    assert!(cause.contains("mysql"), "{cause}");
    assert!(!cause.contains('\n') && cause.len() <= 300, "{cause:?}");
    // The whole log is that line: no backtrace after it.
    assert_eq!(app.request_log().lines().count(), 1);
}
