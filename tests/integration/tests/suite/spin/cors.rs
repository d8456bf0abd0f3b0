//! CORS under real Spin: preflights on every route, the headers on real answers, origins
//! that are not allowed, and what a preflight costs the backends, read from their own
//! counters (a private `redis-server`'s INFO and a proxy in front of MariaDB, so that the
//! other tests running against the shared servers cannot add to the figures).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::json;

use seckill_tests::drivers::app::repo_root;
use seckill_tests::drivers::app::{answer, buyer_token, Answer, App};
use seckill_tests::servers::faults::{
    backend_env, redis_counters, Manifest, Persistence, RedisServer,
};
use seckill_tests::servers::proxy::Proxy;
use yaml_rust2::{Yaml, YamlLoader};

use super::shared::create_voucher;

const SHOP: &str = "http://shop.test:8080";
const OTHER_SHOP: &str = "https://other-shop.test";
const STRANGER: &str = "https://stranger.test";

/// Every route of the API's contract (docs/openapi.yaml) with its methods, as a
/// preflight lists them; `{v}` stands for a voucher, an order's id is 1.
fn routes() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo_root().join("docs/openapi.yaml")).unwrap();
    let document = YamlLoader::load_from_str(&text).unwrap().remove(0);
    let paths = document["paths"].as_hash().expect("paths");
    let routes: Vec<(String, String)> = paths
        .iter()
        .map(|(path, operations)| {
            let operations = operations.as_hash().expect("operations");
            let methods: Vec<String> = ["get", "post", "patch", "delete"]
                .into_iter()
                .filter(|method| operations.contains_key(&Yaml::String(method.to_string())))
                .map(str::to_uppercase)
                .collect();
            let path = path.as_str().unwrap();
            (
                methods.join(", "),
                path.replace("{voucherId}", "{v}").replace("{orderId}", "1"),
            )
        })
        .collect();
    assert!(
        routes.iter().all(|(methods, _)| !methods.is_empty()),
        "{routes:?}"
    );
    routes
}

fn env(allowed_origins: &str) -> Vec<(String, String)> {
    vec![(
        "SPIN_VARIABLE_ALLOWED_ORIGINS".into(),
        allowed_origins.into(),
    )]
}

async fn start(allowed_origins: &str) -> App {
    App::start_with(
        seckill_tests::drivers::app::manifest(),
        env(allowed_origins),
    )
    .await
}

/// A request as a browser on `origin` sends it: a preflight (`OPTIONS` with
/// `Access-Control-Request-Method`), or the real request with `Authorization`.
async fn send(
    app: &App,
    method: &str,
    path: &str,
    origin: Option<&str>,
    preflight: bool,
    token: Option<&str>,
) -> Answer {
    let method = if preflight { "OPTIONS" } else { method };
    let mut request = app.client.request(
        Method::from_bytes(method.as_bytes()).unwrap(),
        format!("{}{path}", app.base),
    );
    if let Some(origin) = origin {
        request = request.header("Origin", origin);
    }
    if preflight {
        request = request
            .header("Access-Control-Request-Method", method)
            .header(
                "Access-Control-Request-Headers",
                "authorization,content-type",
            );
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    answer(request.send().await.expect("Spin answers")).await
}

async fn preflight(app: &App, method: &str, path: &str, origin: &str) -> Answer {
    send(app, method, path, Some(origin), true, None).await
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

/// The names of the `Access-Control-*` headers of an answer.
fn cors_headers(answer: &Answer) -> Vec<String> {
    let mut names: Vec<String> = answer
        .headers
        .keys()
        .map(|name| name.as_str().to_string())
        .filter(|name| name.starts_with("access-control-"))
        .collect();
    names.sort();
    names
}

/// A real answer to `origin` as an allowed one.
fn assert_allowed(answer: &Answer, allow_origin: &str, label: &str) {
    assert_eq!(
        header(&answer.headers, "access-control-allow-origin"),
        Some(allow_origin),
        "{label}: {answer:?}"
    );
    assert_eq!(
        header(&answer.headers, "access-control-expose-headers"),
        Some("Retry-After, Date, X-Request-Id"),
        "{label}"
    );
    assert_eq!(header(&answer.headers, "vary"), Some("Origin"), "{label}");
    assert_eq!(
        header(&answer.headers, "x-content-type-options"),
        Some("nosniff"),
        "{label}"
    );
}

/// A preflight's answer to an allowed origin for a route taking `method`.
fn assert_preflight_allowed(answer: &Answer, allow_origin: &str, method: &str, label: &str) {
    assert_eq!(answer.status, StatusCode::NO_CONTENT, "{label}: {answer:?}");
    assert_eq!(answer.body, json!(""), "{label}: a 204 has no body");
    assert_allowed(answer, allow_origin, label);
    let h = |name| header(&answer.headers, name);
    assert_eq!(h("access-control-allow-methods"), Some(method), "{label}");
    assert_eq!(
        h("access-control-allow-headers"),
        Some("Authorization, Content-Type, X-Request-Id, traceparent"),
        "{label}"
    );
    assert_eq!(h("access-control-max-age"), Some("600"), "{label}");
}

#[tokio::test]
async fn preflights_on_every_route_answer_204_to_each_allowed_origin() {
    let app = start(&format!("{SHOP}, {OTHER_SHOP}")).await;
    let v = app.live_voucher(1).await.to_string();
    for (method, route) in routes() {
        let path = route.replace("{v}", &v);
        let method = method.as_str();
        for origin in [SHOP, OTHER_SHOP] {
            let answer = preflight(&app, method, &path, origin).await;
            assert_preflight_allowed(&answer, origin, method, &format!("{origin} {path}"));
        }
        let refused = preflight(&app, method, &path, STRANGER).await;
        assert_eq!(refused.status, StatusCode::NO_CONTENT, "{refused:?}");
        assert_eq!(cors_headers(&refused), Vec::<String>::new(), "{path}");
        assert_eq!(header(&refused.headers, "vary"), Some("Origin"));
    }

    // Not a preflight: an unknown route is still 404, and an OPTIONS without
    // Access-Control-Request-Method is still a wrong method.
    let unknown = preflight(&app, "GET", "/nope", SHOP).await;
    assert_eq!(
        (unknown.status, unknown.error()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    assert_allowed(&unknown, SHOP, "unknown route");
    let plain = send(&app, "OPTIONS", "/vouchers", Some(SHOP), false, None).await;
    assert_eq!(plain.status, StatusCode::METHOD_NOT_ALLOWED, "{plain:?}");
    assert_eq!(header(&plain.headers, "allow"), Some("GET, POST"));
    assert_allowed(&plain, SHOP, "plain OPTIONS");
    // Nor is one with an empty Origin or Access-Control-Request-Method: browsers never
    // send those (the contract check found them answered 204).
    for (origin, method) in [("", "POST"), (SHOP, "")] {
        let request = app
            .client
            .request(Method::OPTIONS, format!("{}/vouchers", app.base))
            .header("Origin", origin)
            .header("Access-Control-Request-Method", method);
        let empty = answer(request.send().await.unwrap()).await;
        assert_eq!(
            empty.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{origin:?} {method:?}"
        );
    }
}

#[tokio::test]
async fn real_answers_carry_cors_headers_only_for_allowed_origins() {
    let app = start(&format!("{SHOP},{OTHER_SHOP}")).await;
    let v = app.live_voucher(1).await;
    let buyer = buyer_token(7_000_001);
    let other_buyer = buyer_token(7_000_002);
    let order = format!("/vouchers/{v}/orders");
    let read = format!("/vouchers/{v}");

    let created = send(&app, "POST", &order, Some(SHOP), false, Some(&buyer)).await;
    assert_eq!(created.status, StatusCode::CREATED, "{created:?}");
    assert_allowed(&created, SHOP, "201");
    let again = send(&app, "POST", &order, Some(OTHER_SHOP), false, Some(&buyer)).await;
    assert_eq!(again.error(), "already_ordered", "{again:?}");
    assert_allowed(&again, OTHER_SHOP, "409");
    let voucher = send(&app, "GET", &read, Some(SHOP), false, None).await;
    assert_eq!(voucher.status, StatusCode::OK);
    assert_allowed(&voucher, SHOP, "200");
    let unauthorized = send(&app, "POST", &order, Some(SHOP), false, None).await;
    assert_eq!(unauthorized.status, StatusCode::UNAUTHORIZED);
    assert_allowed(&unauthorized, SHOP, "401");

    // A stranger's page gets the same answers without CORS headers: its browser blocks them.
    let sold_out = send(
        &app,
        "POST",
        &order,
        Some(STRANGER),
        false,
        Some(&other_buyer),
    )
    .await;
    assert_eq!(sold_out.error(), "sold_out", "{sold_out:?}");
    let voucher = send(&app, "GET", &read, Some(STRANGER), false, None).await;
    assert_eq!(voucher.status, StatusCode::OK);
    for refused in [&sold_out, &voucher] {
        assert_eq!(cors_headers(refused), Vec::<String>::new(), "{refused:?}");
        assert_eq!(header(&refused.headers, "vary"), Some("Origin"));
    }
    // Without an Origin (curl, servers) nothing changes but Vary.
    let plain = send(&app, "GET", &read, None, false, None).await;
    assert_eq!(plain.status, StatusCode::OK);
    assert_eq!(cors_headers(&plain), Vec::<String>::new());
}

#[tokio::test]
async fn star_allows_every_origin_and_the_default_allows_none() {
    let star = start("*").await;
    for origin in [SHOP, STRANGER, "null"] {
        let answer = preflight(&star, "POST", "/vouchers/1/orders", origin).await;
        assert_preflight_allowed(&answer, "*", "GET, POST", origin);
        let health = send(&star, "GET", "/health", Some(origin), false, None).await;
        assert_allowed(&health, "*", origin);
    }

    let default = App::start().await;
    let answer = preflight(&default, "POST", "/vouchers/1/orders", SHOP).await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT, "{answer:?}");
    assert_eq!(cors_headers(&answer), Vec::<String>::new());
    let health = send(&default, "GET", "/health", Some(SHOP), false, None).await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(cors_headers(&health), Vec::<String>::new());
}

#[tokio::test]
async fn a_preflight_costs_no_redis_command_and_no_mysql_statement() {
    let redis = RedisServer::start(Persistence::None).await;
    let proxy = Proxy::start("127.0.0.1:3306".parse::<SocketAddr>().unwrap()).await;
    let manifest = Manifest::with_absolute_paths();
    let mut variables = backend_env(redis.port(), proxy.port());
    variables.extend(env(SHOP));
    let app = App::start_with(manifest.path(), variables).await;
    let stats = proxy.stats();
    let mysql = || {
        (
            stats.forwarded.load(Ordering::SeqCst),
            stats.statements.load(Ordering::SeqCst),
        )
    };

    let mut counters = redis.conn().await;
    let (redis_before, redis_connections_before) = redis_counters(&mut counters).await;
    let mysql_before = mysql();
    let rounds = 20;
    let routes = routes();
    for _ in 0..rounds {
        for (method, route) in &routes {
            let path = route.replace("{v}", "1");
            let answer = preflight(&app, method, &path, SHOP).await;
            assert_preflight_allowed(&answer, SHOP, method, &path);
        }
    }
    let (redis_after, redis_connections_after) = redis_counters(&mut counters).await;
    let mysql_after = mysql();
    let preflights = rounds * routes.len();
    println!(
        "cors: {preflights} preflights: {} Redis commands, {} Redis connections, {} MySQL connections, {} MySQL statements",
        redis_after - redis_before,
        redis_connections_after - redis_connections_before,
        mysql_after.0 - mysql_before.0,
        mysql_after.1 - mysql_before.1,
    );
    assert_eq!(
        redis_after, redis_before,
        "Redis commands during preflights"
    );
    assert_eq!(redis_connections_after, redis_connections_before);
    assert_eq!(mysql_after, mysql_before, "MySQL (connections, statements)");

    // The counters do see the component's traffic: one real request moves both.
    let created = create_voucher(
        &app,
        "cors counter check",
        "2030-01-01T00:00:00Z",
        "2030-01-02T00:00:00Z",
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{created:?}");
    let (redis_end, _) = redis_counters(&mut counters).await;
    let mysql_end = mysql();
    println!(
        "cors: one POST /vouchers: {} Redis commands, {} MySQL statements",
        redis_end - redis_after,
        mysql_end.1 - mysql_after.1,
    );
    assert!(
        redis_end > redis_after,
        "Redis counters missed a real request"
    );
    assert!(
        mysql_end.1 > mysql_after.1,
        "the proxy missed a real request"
    );
}
