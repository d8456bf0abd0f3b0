//! Hostile input against the running component: malformed, oversized and mistyped
//! bodies, odd numbers and titles, ids past 64 bits, paths with encoded tricks, wrong
//! methods, and every way to get a token wrong. Each request goes out byte for byte as
//! written (a raw HTTP/1.1 client: no URL normalisation turns `%2e%2e` or `..` into
//! something else) and must get its exact 4xx with a JSON `{"error", "message"}`, never
//! a 5xx; afterwards no voucher was created and no order taken.

use std::net::SocketAddr;

use chrono::Utc;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use seckill_tests::drivers::app::{
    buyer_token, json_or_text, signed_token, App, ADMIN_TOKEN, JWT_SECRET,
};
use seckill_tests::drivers::invariants::{after_drainer, read, SaleRecord};
use seckill_tests::servers::local::{fresh_voucher_id, redis};

use super::shared::vouchers_where;

/// An answer read off the wire.
#[derive(Debug)]
struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one request exactly as given (request line, headers, body) on a fresh
/// connection and reads the answer. `Host`, `Connection: close` and, when a body is
/// given and no `Content-Length` or `Transfer-Encoding` header is, `Content-Length` are
/// added.
async fn send(
    addr: SocketAddr,
    method: &str,
    target: &[u8],
    headers: &[(&str, &[u8])],
    body: &[u8],
) -> Raw {
    let mut request = Vec::new();
    request.extend_from_slice(method.as_bytes());
    request.push(b' ');
    request.extend_from_slice(target);
    request.extend_from_slice(b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    let framed = headers.iter().any(|(n, _)| {
        n.eq_ignore_ascii_case("content-length") || n.eq_ignore_ascii_case("transfer-encoding")
    });
    for (name, value) in headers {
        request.extend_from_slice(name.as_bytes());
        request.extend_from_slice(b": ");
        request.extend_from_slice(value);
        request.extend_from_slice(b"\r\n");
    }
    if !framed && !body.is_empty() {
        request.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    request.extend_from_slice(body);

    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(&request).await.unwrap();
    let mut bytes = Vec::new();
    // The server may answer (and close) before it has read a body it refuses.
    let _ = stream.read_to_end(&mut bytes).await;
    parse_response(&bytes)
}

fn parse_response(bytes: &[u8]) -> Raw {
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(bytes)));
    let head = std::str::from_utf8(&bytes[..split]).unwrap();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = bytes[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body);
    }
    let body = json_or_text(&body);
    Raw {
        status,
        headers,
        body,
    }
}

fn dechunk(mut bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = bytes.windows(2).position(|w| w == b"\r\n").unwrap();
        let size_text = std::str::from_utf8(&bytes[..line_end]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        bytes = &bytes[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&bytes[..size]);
        bytes = &bytes[size + 2..];
    }
}

/// The answer is the error `code` with `status`, as JSON with a message for people.
#[track_caller]
fn assert_refused(label: &str, answer: &Raw, status: u16, code: &str) {
    assert_eq!(
        (answer.status, answer.body["error"].as_str()),
        (status, Some(code)),
        "{label}: {answer:?}"
    );
    assert_eq!(
        answer.header("content-type"),
        Some("application/json"),
        "{label}"
    );
    assert_eq!(
        answer.header("x-content-type-options"),
        Some("nosniff"),
        "{label}"
    );
    let message = answer.body["message"].as_str().unwrap_or("");
    assert!(!message.is_empty(), "{label}: no message in {answer:?}");
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// A run-unique tag, put in the titles and descriptions of every voucher this file
/// tries to create, so that "nothing was created" can be checked in the shared MySQL.
fn tag() -> String {
    format!("hostile-{}", fresh_voucher_id())
}

async fn vouchers_tagged(tag: &str) -> u64 {
    let pattern = format!("%{tag}%");
    vouchers_where("title LIKE ? OR description LIKE ?", (&pattern, &pattern)).await
}

fn at(offset_secs: i64) -> String {
    (Utc::now() + chrono::Duration::seconds(offset_secs)).to_rfc3339()
}

/// A valid creation body (tagged), with `change` applied to it.
fn voucher_body(tag: &str, change: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut body = json!({
        "title": format!("t {tag}"),
        "description": tag,
        "stock": 5,
        "begin_time": at(-60),
        "end_time": at(3600),
    });
    change(&mut body);
    body.to_string().into_bytes()
}

const JSON: (&str, &[u8]) = ("Content-Type", b"application/json");

fn bearer(token: &str) -> Vec<u8> {
    format!("Bearer {token}").into_bytes()
}

#[tokio::test]
async fn malformed_oversized_and_mistyped_bodies_create_nothing() {
    let app = App::start().await;
    let addr = app.addr();
    let tag = tag();
    let admin = bearer(ADMIN_TOKEN);
    let auth = ("Authorization", admin.as_slice());
    let valid = voucher_body(&tag, |_| {});
    let mut sent = 0;

    let mut oversized = valid.clone();
    oversized.resize(16 * 1024 + 1, b' ');
    let mut bad_utf8 = valid.clone();
    bad_utf8.splice(10..10, [0xff, 0xfe]);
    let set = |field: &str, value: Value| voucher_body(&tag, |b| b[field] = value);
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("open brace", b"{".to_vec()),
        ("truncated", valid[..valid.len() / 2].to_vec()),
        ("array", b"[]".to_vec()),
        ("null", b"null".to_vec()),
        ("string", b"\"voucher\"".to_vec()),
        ("trailing comma", {
            let mut b = valid.clone();
            b.pop();
            b.extend_from_slice(b",}");
            b
        }),
        ("two documents", [valid.clone(), valid.clone()].concat()),
        ("not UTF-8", bad_utf8),
        ("UTF-8 BOM", [b"\xef\xbb\xbf".to_vec(), valid.clone()].concat()),
        ("NUL bytes", b"\0\0\0\0".to_vec()),
        (
            "unknown field",
            set("owner_id", json!(1)),
        ),
        (
            "duplicate field",
            format!(
                "{{\"title\":\"a {tag}\",\"title\":\"b {tag}\",\"stock\":5,\"begin_time\":\"{}\",\"end_time\":\"{}\"}}",
                at(-60),
                at(3600)
            )
            .into_bytes(),
        ),
        (
            "missing stock",
            voucher_body(&tag, |b| {
                b.as_object_mut().unwrap().remove("stock");
            }),
        ),
        ("stock 0", set("stock", json!(0))),
        ("stock -1", set("stock", json!(-1))),
        (
            "stock above the limit",
            set("stock", json!(10_000_001)),
        ),
        (
            "stock i64::MAX",
            set("stock", json!(i64::MAX)),
        ),
        (
            "stock u64::MAX",
            set("stock", json!(u64::MAX)),
        ),
        ("stock 2^64", {
            let text = String::from_utf8(valid.clone()).unwrap();
            text.replace("\"stock\":5", "\"stock\":18446744073709551616")
                .into_bytes()
        }),
        ("stock 1e400", {
            let text = String::from_utf8(valid.clone()).unwrap();
            text.replace("\"stock\":5", "\"stock\":1e400").into_bytes()
        }),
        ("stock 5.0", set("stock", json!(5.0))),
        ("stock \"5\"", set("stock", json!("5"))),
        ("stock null", set("stock", json!(null))),
        ("title blank", set("title", json!(" \t\n"))),
        ("title 129 characters", {
            let title = format!("{tag}{}", "券".repeat(129 - tag.chars().count()));
            set("title", json!(title))
        }),
        ("title a number", set("title", json!(7))),
        ("description 1025 characters", {
            let description = format!("{tag}{}", "x".repeat(1025 - tag.len()));
            set("description", json!(description))
        }),
        (
            "begin not a time",
            set("begin_time", json!("tomorrow")),
        ),
        (
            "begin month 13",
            set("begin_time", json!("2030-13-01T00:00:00Z")),
        ),
        (
            "begin without a zone",
            set("begin_time", json!("2030-01-01T00:00:00")),
        ),
        (
            "begin before 1970",
            set("begin_time", json!("1969-12-31T23:59:59Z")),
        ),
        (
            "end after 9999",
            set("end_time", json!("+10000-01-01T00:00:00Z")),
        ),
        (
            "end before begin",
            set("end_time", json!(at(-120))),
        ),
        (
            "end equals begin",
            voucher_body(&tag, |b| b["end_time"] = b["begin_time"].clone()),
        ),
    ];
    for (label, body) in &bodies {
        let answer = send(addr, "POST", b"/vouchers", &[auth, JSON], body).await;
        sent += 1;
        assert_refused(label, &answer, 400, "bad_request");
    }

    let over = send(addr, "POST", b"/vouchers", &[auth, JSON], &oversized).await;
    sent += 1;
    assert_refused("16 KiB + 1", &over, 413, "payload_too_large");
    // A length that announces more than the limit is refused before any body is read.
    let announced = send(
        addr,
        "POST",
        b"/vouchers",
        &[auth, JSON, ("Content-Length", b"1000000000000")],
        b"",
    )
    .await;
    sent += 1;
    assert_refused("Content-Length 10^12", &announced, 413, "payload_too_large");
    // Chunked, so no length up front: refused once the 16 KiB are passed.
    let chunked = {
        let mut body = format!("{:x}\r\n", oversized.len()).into_bytes();
        body.extend_from_slice(&oversized);
        body.extend_from_slice(b"\r\n0\r\n\r\n");
        body
    };
    let answer = send(
        addr,
        "POST",
        b"/vouchers",
        &[auth, JSON, ("Transfer-Encoding", b"chunked")],
        &chunked,
    )
    .await;
    sent += 1;
    assert_refused("chunked 16 KiB + 1", &answer, 413, "payload_too_large");

    let content_types: [Option<&[u8]>; 7] = [
        None,
        Some(b"text/plain"),
        Some(b"application/x-www-form-urlencoded"),
        Some(b"multipart/form-data; boundary=x"),
        Some(b"application/json-patch+json"),
        Some(b"application/jsonp"),
        Some(b"json"),
    ];
    for content_type in content_types {
        let mut headers = vec![auth];
        if let Some(value) = content_type {
            headers.push(("Content-Type", value));
        }
        let answer = send(addr, "POST", b"/vouchers", &headers, &valid).await;
        sent += 1;
        let label = format!(
            "Content-Type {:?}",
            content_type.map(String::from_utf8_lossy)
        );
        assert_refused(&label, &answer, 400, "bad_request");
    }

    assert_eq!(
        vouchers_tagged(&tag).await,
        0,
        "a refused body created a voucher"
    );
    println!("hostile: bodies: {sent} requests, all 4xx, no voucher created");
}

#[tokio::test]
async fn non_ascii_titles_round_trip_exactly() {
    let app = App::start().await;
    let addr = app.addr();
    let tag = tag();
    let admin = bearer(ADMIN_TOKEN);
    let auth = ("Authorization", admin.as_slice());
    let titles = [
        format!("秒杀 🎟️ {tag}"),
        // Combining marks, right-to-left text, a zero-width joiner sequence.
        format!("e\u{301} שלום 👩\u{200d}💻 {tag}"),
        // Exactly 128 characters, most of them 4 bytes in UTF-8.
        format!("{tag}{}", "🎟".repeat(128 - tag.chars().count())),
    ];
    for title in &titles {
        let body = voucher_body(&tag, |b| b["title"] = json!(title));
        let created = send(addr, "POST", b"/vouchers", &[auth, JSON], &body).await;
        assert_eq!(created.status, 201, "{title}: {created:?}");
        assert_eq!(created.body["title"], json!(title));
        let id = created.body["id"].as_u64().unwrap();
        let path = format!("/vouchers/{id}");
        let read_back = send(addr, "GET", path.as_bytes(), &[], b"").await;
        assert_eq!(read_back.status, 200, "{read_back:?}");
        assert_eq!(read_back.body["title"].as_str(), Some(title.as_str()));
    }
    assert_eq!(vouchers_tagged(&tag).await, titles.len() as u64);
    println!(
        "hostile: non-ASCII titles: {} requests, each stored and read back exactly",
        2 * titles.len()
    );
}

/// A running component with a live voucher (5 units) and what its sale looked like
/// before the test, plus a run-unique tag and a valid creation body carrying it.
struct Scene {
    /// Kept alive: it serves the requests.
    _app: App,
    addr: SocketAddr,
    voucher: u64,
    before: SaleRecord,
    tag: String,
    valid: Vec<u8>,
}

impl Scene {
    async fn new() -> Scene {
        let app = App::start().await;
        let addr = app.addr();
        let voucher = app.live_voucher(5).await;
        let tag = tag();
        Scene {
            before: read(voucher).await,
            valid: voucher_body(&tag, |_| {}),
            _app: app,
            addr,
            voucher,
            tag,
        }
    }
}

/// Who sends a request.
#[derive(Clone, Copy)]
enum As {
    Admin,
    Buyer,
}

/// A refused request: method, target, sender, whether it carries a valid creation body,
/// and the status it must get.
struct Case(&'static str, String, As, bool, u16);

fn code_of(status: u16) -> &'static str {
    match status {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        413 => "payload_too_large",
        other => panic!("no code for {other}"),
    }
}

#[tokio::test]
async fn odd_ids_paths_and_methods_are_refused_and_change_nothing() {
    let scene = Scene::new().await;
    let Scene { addr, voucher, .. } = scene;
    let (before, tag, valid) = (&scene.before, &scene.tag, &scene.valid);
    let admin = bearer(ADMIN_TOKEN);
    let buyer = bearer(&buyer_token(7));
    let v = voucher.to_string();
    let c = |method, target: &str, who, status| {
        Case(method, target.replace("{v}", &v), who, false, status)
    };
    let with_body =
        |method, target: &str, who, status| Case(method, target.into(), who, true, status);
    use As::{Admin, Buyer};

    let cases = [
        // Ids that are not canonical positive 63-bit decimals.
        c("GET", "/vouchers/0", Admin, 400),
        c("GET", "/vouchers/-1", Admin, 400),
        c("GET", "/vouchers/01", Admin, 400),
        c("GET", "/vouchers/+1", Admin, 400),
        c("GET", "/vouchers/1e3", Admin, 400),
        c("GET", "/vouchers/0x10", Admin, 400),
        c("GET", "/vouchers/%31", Admin, 400),
        c("GET", "/vouchers/%EF%BC%91", Admin, 400),
        c("GET", "/vouchers/9223372036854775808", Admin, 400),
        c("GET", "/vouchers/18446744073709551615", Admin, 400),
        c("GET", "/vouchers/18446744073709551616", Admin, 400),
        c("GET", "/vouchers/99999999999999999999999999", Admin, 400),
        c("POST", "/vouchers/18446744073709551616/orders", Buyer, 400),
        c("POST", "/vouchers/-5/orders", Buyer, 400),
        c("POST", "/vouchers/18446744073709551616/sync", Admin, 400),
        c("GET", "/orders/0", Admin, 400),
        c("GET", "/orders/9223372036854775808", Admin, 400),
        c("GET", "/orders/18446744073709551616", Admin, 400),
        c("GET", "/orders/-1", Buyer, 400),
        // Encoded and dotted paths are taken literally: never another route.
        c("GET", "/vouchers/%2e%2e", Admin, 400),
        c("GET", "/vouchers/..", Admin, 400),
        c("GET", "/vouchers/{v}%2Fsync", Admin, 400),
        c("POST", "/vouchers/{v}/orders/../sync", Admin, 404),
        c("POST", "/vouchers/{v}/orders/%2e%2e/sync", Admin, 404),
        c("POST", "/vouchers/{v}%2Forders", Buyer, 405),
        c("POST", "/vouchers/{v}/orders%2F", Buyer, 404),
        c("POST", "/vouchers/{v}/orders/", Buyer, 404),
        c("POST", "/vouchers/{v}//orders", Buyer, 404),
        c("POST", "//vouchers/{v}/orders", Buyer, 404),
        c("POST", "/vouchers/{v}/ORDERS", Buyer, 404),
        c("POST", "/vouchers/{v}/orders%00", Buyer, 404),
        c("POST", "/./vouchers/{v}/orders", Buyer, 404),
        c("POST", "/VOUCHERS/{v}/orders", Buyer, 404),
        with_body("POST", "//vouchers", Admin, 404),
        with_body("POST", "/vouchers/", Admin, 405),
        with_body("POST", "/vouchers%2F", Admin, 404),
        with_body("POST", "/%76ouchers", Admin, 404),
        with_body("POST", "/vouchers/.", Admin, 405),
        c("GET", &format!("/{}", "a/".repeat(2000)), Admin, 404),
        // Wrong methods, including ones no route knows.
        c("PATCH", "/vouchers/{v}/orders", Buyer, 405),
        c("PUT", "/vouchers/{v}/orders", Buyer, 405),
        c("DELETE", "/vouchers/{v}", Admin, 405),
        with_body("PATCH", "/vouchers", Admin, 405),
        with_body("PUT", "/vouchers", Admin, 405),
        c("GET", "/vouchers/{v}/sync", Admin, 405),
        c("OPTIONS", "/vouchers", Admin, 405),
        c("TRACE", "/health", Admin, 405),
        c("BREW", "/vouchers/{v}/orders", Buyer, 405),
        c("post", "/vouchers/{v}/orders", Buyer, 405),
    ];
    for Case(method, target, who, with_body, status) in &cases {
        let authorization = match who {
            Admin => &admin,
            Buyer => &buyer,
        };
        let mut headers = vec![("Authorization", authorization.as_slice())];
        let body: &[u8] = if *with_body {
            headers.push(JSON);
            valid
        } else {
            b""
        };
        let answer = send(addr, method, target.as_bytes(), &headers, body).await;
        let label = format!("{method} {}", &target[..target.len().min(80)]);
        assert_refused(&label, &answer, *status, code_of(*status));
        if *status == 405 {
            assert!(answer.header("allow").is_some(), "{label}: no Allow");
        }
    }

    assert_eq!(
        read(voucher).await,
        *before,
        "a refused request changed the sale"
    );
    assert_eq!(
        vouchers_tagged(tag).await,
        0,
        "a refused request created a voucher"
    );
    println!(
        "hostile: ids, paths and methods: {} requests, all 4xx, nothing changed",
        cases.len()
    );
}

type Headers<'a> = Vec<(&'a str, &'a [u8])>;

/// A buyer token signed with the right secret over `claims`, expiring in ten minutes.
fn signed(claims: Value) -> Vec<u8> {
    bearer(&signed_token(JWT_SECRET, claims, Some(600)))
}

#[tokio::test]
async fn bad_tokens_are_refused_and_change_nothing() {
    let scene = Scene::new().await;
    let Scene { addr, voucher, .. } = scene;
    let (before, tag, valid) = (&scene.before, &scene.tag, &scene.valid);
    let orders = format!("/vouchers/{voucher}/orders");
    let sync = format!("/vouchers/{voucher}/sync");
    let good = buyer_token(7);
    let parts: Vec<&str> = good.split('.').collect();
    let (payload, signature) = (parts[1], parts[2]);
    let exp = Utc::now().timestamp() + 600;
    let header = |alg: &str| base64url(json!({ "alg": alg, "typ": "JWT" }).to_string().as_bytes());
    let with_header =
        |alg: &str, signature: &str| bearer(&format!("{}.{payload}.{signature}", header(alg)));
    let raw = |text: String| text.into_bytes();
    let mut sent = 0;

    let unauthorized: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("missing", None),
        ("empty", Some(raw(String::new()))),
        ("scheme only", Some(raw("Bearer".into()))),
        ("scheme and space", Some(raw("Bearer ".into()))),
        ("no space", Some(raw(format!("Bearer{good}")))),
        ("tab", Some(raw(format!("Bearer\t{good}")))),
        ("Basic", Some(raw(format!("Basic {good}")))),
        ("token alone", Some(raw(good.clone()))),
        ("two tokens", Some(raw(format!("Bearer {good} {good}")))),
        ("malformed", Some(bearer("abc"))),
        ("three dots", Some(bearer("..."))),
        (
            "two parts",
            Some(bearer(&format!("{}.{payload}", header("HS256")))),
        ),
        ("four parts", Some(bearer(&format!("{good}.{signature}")))),
        ("not base64", Some(bearer("e30.e30.!!!"))),
        ("10 KB", Some(bearer(&"a".repeat(10_000)))),
        ("alg none", Some(with_header("none", ""))),
        (
            "alg none, signature kept",
            Some(with_header("none", signature)),
        ),
        ("alg RS256", Some(with_header("RS256", signature))),
        ("alg HS512", Some(with_header("HS512", signature))),
        ("payload swapped", {
            let forged = base64url(json!({"sub": "8", "exp": exp}).to_string().as_bytes());
            Some(bearer(&format!("{}.{forged}.{signature}", header("HS256"))))
        }),
        (
            "other secret",
            Some(bearer(&signed_token(
                "not-the-secret",
                json!({"sub": "7"}),
                Some(600),
            ))),
        ),
        (
            "expired",
            Some(bearer(&signed_token(
                JWT_SECRET,
                json!({"sub": "7"}),
                Some(-1),
            ))),
        ),
        (
            "no exp",
            Some(bearer(&signed_token(JWT_SECRET, json!({"sub": "7"}), None))),
        ),
        (
            "nbf in the future",
            Some(signed(json!({"sub": "7", "nbf": exp}))),
        ),
        ("sub 0", Some(signed(json!({"sub": "0"})))),
        ("sub -1", Some(signed(json!({"sub": "-1"})))),
        ("sub abc", Some(signed(json!({"sub": "abc"})))),
        (
            "sub 2^64",
            Some(signed(json!({"sub": "18446744073709551616"}))),
        ),
        ("sub 007", Some(signed(json!({"sub": "007"})))),
        ("sub a number", Some(signed(json!({"sub": 7})))),
        ("sub missing", Some(signed(json!({})))),
        (
            "admin token and a character",
            Some(bearer(&format!("{ADMIN_TOKEN}x"))),
        ),
    ];
    for (label, authorization) in &unauthorized {
        for (method, path, body) in [
            ("POST", orders.as_str(), &[][..]),
            ("POST", "/vouchers", &valid[..]),
            ("POST", sync.as_str(), &[][..]),
        ] {
            let mut headers = vec![JSON];
            if let Some(value) = authorization {
                headers.push(("Authorization", value));
            }
            let answer = send(addr, method, path.as_bytes(), &headers, body).await;
            sent += 1;
            assert_refused(
                &format!("{label}: {method} {path}"),
                &answer,
                401,
                "unauthorized",
            );
        }
    }

    // A header that is not UTF-8 never reaches the component: Spin (3.6.3 and 4.0.2)
    // refuses the request itself with an empty 500. Two Authorization headers are ours.
    let (good_bearer, admin) = (bearer(&good), bearer(ADMIN_TOKEN));
    let not_utf8: Headers = vec![("Authorization", b"Bearer \xff\xfe")];
    let answer = send(addr, "POST", orders.as_bytes(), &not_utf8, b"").await;
    sent += 1;
    assert_eq!(
        (answer.status, &answer.body),
        (500, &Value::String(String::new())),
        "Authorization not UTF-8: {answer:?}"
    );
    let twice: Headers = vec![("Authorization", &good_bearer), ("Authorization", &admin)];
    let answer = send(addr, "POST", orders.as_bytes(), &twice, b"").await;
    sent += 1;
    assert_refused("two Authorization headers", &answer, 400, "bad_request");

    // The right secret, the wrong role.
    for (label, path, authorization, body) in [
        ("admin buys", orders.as_str(), &admin, &[][..]),
        ("buyer creates", "/vouchers", &good_bearer, &valid[..]),
        ("buyer syncs", sync.as_str(), &good_bearer, &[][..]),
    ] {
        let headers = [("Authorization", authorization.as_slice()), JSON];
        let answer = send(addr, "POST", path.as_bytes(), &headers, body).await;
        sent += 1;
        assert_refused(label, &answer, 403, "forbidden");
    }

    assert_eq!(
        read(voucher).await,
        *before,
        "a refused token changed the sale"
    );
    assert_eq!(
        vouchers_tagged(tag).await,
        0,
        "a refused token created a voucher"
    );

    // Extra whitespace around the token is tolerated (RFC 7235 allows one or more
    // spaces after the scheme; header values are trimmed): still buyer 7.
    let spaced = raw(format!("Bearer   {good}  "));
    let header = [("Authorization", spaced.as_slice())];
    let answer = send(addr, "POST", orders.as_bytes(), &header, b"").await;
    sent += 1;
    assert_eq!(answer.status, 201, "{answer:?}");
    assert_eq!(answer.body["user_id"], "7");

    // The scheme is case-insensitive (RFC 7235): these authenticate as buyer 7, who has
    // just bought, so they get the existing order back (once her 201's publication, which
    // follows it, has landed).
    after_drainer(&mut redis().await, voucher).await;
    for scheme in ["bearer", "BEARER"] {
        let value = raw(format!("{scheme} {good}"));
        let header = [("Authorization", value.as_slice())];
        let again = send(addr, "POST", orders.as_bytes(), &header, b"").await;
        sent += 1;
        assert_eq!(again.status, 409, "{scheme}: {again:?}");
        assert_eq!(again.body["error"], "already_ordered");
        assert_eq!(again.body["order_id"], answer.body["order_id"]);
    }
    println!("hostile: tokens: {sent} requests, every bad one 400/401/403, nothing changed");
}
