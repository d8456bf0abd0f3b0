//! Slow clients against the running component, with Spin's instance cap set low: bodies
//! announced and never sent, and heads never finished, held open up to the cap while a
//! sale runs. The component routes and authenticates from the head and reads a body only
//! on a route that takes one, within a deadline: a slow body that is not the sale's work
//! holds no instance, one that is gets its `408`, and the sale's buyers are answered as
//! before.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use seckill_tests::drivers::app::{buyer_token, manifest, p3, App};

/// Spin's instance cap in these tests: as many slow clients as it takes to fill it.
const CAP: usize = 12;

/// Anonymous slow bodies held at once: the cap, under Spin 3. Under Spin 4.0.2 a request
/// answered before its body came still takes up room in the instance pool (12 such at a
/// cap of 12, or 10, left buyers an empty `500`, "oneshot canceled"; the same 12 with
/// their bodies sent, none): the component cannot free it; the balancer's
/// `option http-buffer-request` keeps such requests from Spin (docs/operations.md,
/// "Exposed to the internet").
fn slow_bodies_held() -> usize {
    if p3() {
        CAP / 2
    } else {
        CAP
    }
}
/// How long the component waits for a body (`http::BODY_DEADLINE`).
const BODY_DEADLINE: Duration = Duration::from_secs(5);

async fn app() -> App {
    App::start_with(
        manifest(),
        vec![("SPIN_MAX_INSTANCE_COUNT".into(), CAP.to_string())],
    )
    .await
}

/// Opens a connection and sends `method target` with `headers`, a `Content-Length` of
/// `announced` and only the first byte of its body; the connection stays open.
async fn slow_body(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, String)],
    announced: usize,
) -> TcpStream {
    let mut head = format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {announced}\r\n\r\n{{"));
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// The answer's status and JSON body, as soon as its head and `Content-Length` bytes of
/// body have come; `None` when none came within `wait`.
async fn answer_within(stream: &mut TcpStream, wait: Duration) -> Option<(u16, Value, String)> {
    let read = async {
        let mut bytes = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            if let Some(split) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&bytes[..split]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length:"))
                    .map_or(0, |value| value.trim().parse().unwrap());
                if bytes.len() >= split + 4 + length {
                    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                    let body = serde_json::from_slice(&bytes[split + 4..split + 4 + length])
                        .unwrap_or(Value::Null);
                    return Some((status, body, head));
                }
            }
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => bytes.extend_from_slice(&buffer[..n]),
            }
        }
    };
    tokio::time::timeout(wait, read).await.ok().flatten()
}

/// Buyers `users` press once each; every one must be ordered.
async fn sale_goes_on(app: &App, voucher: u64, users: std::ops::Range<u64>) {
    for user in users {
        let answer = app.buy(voucher, user).await;
        assert_eq!(
            answer.status,
            StatusCode::CREATED,
            "buyer {user}: {answer:?}"
        );
    }
}

#[tokio::test]
async fn slow_bodies_up_to_the_instance_cap_leave_the_sale_answered() {
    let app = app().await;
    let voucher = app.live_voucher(100).await;
    let purchase = format!("/vouchers/{voucher}/orders");
    let page = format!("/vouchers/{voucher}");

    // Anonymous bodies of 16,000 bytes, one byte sent, on routes that take no body or
    // refuse the caller from the head: each answered at once, none holding an instance.
    let anonymous: [(&str, &str, u16); 4] = [
        ("POST", "/health/live", 405),
        ("GET", "/health/live", 200),
        ("POST", &purchase, 401),
        ("GET", &page, 200),
    ];
    let mut held = Vec::new();
    for i in 0..slow_bodies_held() {
        let (method, target, _) = anonymous[i % anonymous.len()];
        held.push(slow_body(app.addr(), method, target, &[], 16_000).await);
    }
    for (i, stream) in held.iter_mut().enumerate() {
        let (method, target, status) = anonymous[i % anonymous.len()];
        let answer = answer_within(stream, Duration::from_secs(3)).await;
        let (got, body, head) =
            answer.unwrap_or_else(|| panic!("{method} {target}: no answer to a slow body"));
        assert_eq!(got, status, "{method} {target}: {body}");
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    }
    // While they are held open, the sale's buyers are answered as before.
    sale_goes_on(&app, voucher, 1..21).await;

    // On the route that takes a body, a buyer's slow body gets its 408 within the
    // deadline; the sale goes on meanwhile.
    let started = Instant::now();
    let mut slow_buyers = Vec::new();
    for user in 1001..1004 {
        let headers = [
            ("Authorization", format!("Bearer {}", buyer_token(user))),
            ("Content-Type", "application/json".to_string()),
        ];
        slow_buyers.push(slow_body(app.addr(), "POST", &purchase, &headers, 14).await);
    }
    sale_goes_on(&app, voucher, 21..31).await;
    for stream in &mut slow_buyers {
        let answer = answer_within(stream, BODY_DEADLINE + Duration::from_secs(3)).await;
        let (status, body, _) = answer.expect("no answer to a buyer's slow body");
        assert_eq!(
            (status, body["error"].as_str()),
            (408, Some("request_timeout")),
            "{body}"
        );
        assert!(!body["message"].as_str().unwrap_or("").is_empty(), "{body}");
    }
    let waited = started.elapsed();
    assert!(
        waited >= BODY_DEADLINE - Duration::from_millis(500)
            && waited < BODY_DEADLINE + Duration::from_secs(2),
        "408s after {waited:?}"
    );
    // The slow buyers bought nothing; the others did.
    let page = app.call(Method::GET, &page, None, None).await;
    assert_eq!(page.body["remaining"], 70, "{page:?}");
    drop(held);
    eprintln!(
        "slow_clients: {} anonymous slow bodies answered from their heads, 30 buyers ordered, 3 slow buyers' 408 after {waited:?}",
        slow_bodies_held()
    );
}

#[tokio::test]
async fn half_sent_heads_up_to_the_instance_cap_hold_no_instance() {
    let app = app().await;
    let voucher = app.live_voucher(20).await;
    let mut held = Vec::new();
    for _ in 0..CAP * 2 {
        let mut stream = TcpStream::connect(app.addr()).await.unwrap();
        stream
            .write_all(b"POST /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .unwrap();
        held.push(stream);
    }
    sale_goes_on(&app, voucher, 1..11).await;
    // Spin holds them (the balancer's `timeout http-request` bounds them, not Spin).
    for stream in &mut held {
        assert!(answer_within(stream, Duration::from_millis(10))
            .await
            .is_none());
    }
}
