//! Every answer leaves Spin in one write: head and body together, with a
//! `content-length` that matches. Spin sets no `TCP_NODELAY`, so a body written after
//! the head would wait for the client's delayed ACK (about 40 ms) on a keep-alive
//! connection; see `answer/src/lib.rs`. A raw client sends requests one after the other
//! on one keep-alive connection and reads once per request: the first read must hold the
//! whole answer, every time.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use seckill_tests::drivers::app::{App, ADMIN_TOKEN};

/// Requests per path: enough that a body sent on its own would be caught.
const ROUNDS: usize = 20;

/// Sends `request` and reads once; returns the head and the bytes after it.
async fn first_read(stream: &mut TcpStream, request: &[u8]) -> (String, Vec<u8>) {
    stream.write_all(request).await.unwrap();
    let mut buffer = vec![0; 64 * 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
        .await
        .expect("an answer within 5 s")
        .unwrap();
    let bytes = &buffer[..n];
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no whole head in the first read: {bytes:?}"));
    let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
    (head, bytes[end + 4..].to_vec())
}

fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no content-length: {head}"))
}

#[tokio::test]
async fn every_answer_leaves_in_one_write() {
    let app = App::start().await;
    let bearer = format!("Authorization: Bearer {ADMIN_TOKEN}\r\n");
    let paths: [(&str, &str); 5] = [
        ("GET /health", ""),
        // Redis only: an id above the highest is a 404 without MySQL.
        ("GET /vouchers/99999999999", ""),
        ("GET /vouchers?limit=1", bearer.as_str()),
        ("POST /vouchers", ""),
        // The sale page's component: an asset under one write's size.
        ("GET /shop/sale.css", ""),
    ];
    for (line, headers) in paths {
        let mut stream = TcpStream::connect(app.addr()).await.unwrap();
        let request =
            format!("{line} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Content-Length: 0\r\n\r\n");
        for round in 0..ROUNDS {
            let (head, body) = first_read(&mut stream, request.as_bytes()).await;
            assert!(
                head.starts_with("HTTP/1.1 "),
                "{line}, round {round}: {head}"
            );
            assert_eq!(
                body.len(),
                content_length(&head),
                "{line}, round {round}: the first read holds {} bytes of the body; {head}",
                body.len()
            );
        }
    }
}
