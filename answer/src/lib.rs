//! Sends a Spin component's HTTP answer whole, so that its head and its body leave the
//! host in one write.
//!
//! Spin sets no `TCP_NODELAY`. Handed to Spin before its body is written (the SDK's usual
//! path), an answer's head goes out first and its body in a second write, which Nagle's
//! algorithm holds until the client's delayed ACK: about 40 ms on every keep-alive
//! connection at low concurrency, a load balancer's included. Written and finished
//! before it is handed over, with a `content-length` that matches, the answer leaves in
//! one `writev`.
//!
//! Until the answer is handed over, the host's body channel holds only a chunk or two: a
//! second write would wait for ever. So a body larger than one write (WASI's 4096 bytes
//! for a blocking write) keeps the usual order: handed over first, then written.

use spin_sdk::http::{Fields, OutgoingBody, OutgoingResponse, Response, ResponseOutparam};

/// The most one blocking write takes.
const ONE_WRITE: usize = 4096;

/// Sends `response` on `out`. A client that has gone is nobody's error: the request's
/// own log line was written before.
pub fn send(out: ResponseOutparam, response: Response) {
    let status = *response.status();
    let mut headers: Vec<(String, Vec<u8>)> = response
        .headers()
        .filter(|(name, _)| !name.eq_ignore_ascii_case("content-length"))
        .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
        .collect();
    let bytes = response.into_body();
    headers.push((
        "content-length".into(),
        bytes.len().to_string().into_bytes(),
    ));
    let outgoing = OutgoingResponse::new(
        Fields::from_list(&headers).expect("the components' headers are valid"),
    );
    outgoing
        .set_status_code(status)
        .expect("the components' statuses are valid");
    let body = outgoing.body().expect("a new answer's body");
    if bytes.len() <= ONE_WRITE {
        write(&body, &bytes);
        let _ = OutgoingBody::finish(body, None);
        out.set(outgoing);
    } else {
        out.set(outgoing);
        write(&body, &bytes);
        let _ = OutgoingBody::finish(body, None);
    }
}

/// Writes `bytes` to `body`, one blocking write per 4096 bytes. The stream is gone when
/// this returns: finishing a body whose stream is alive traps.
fn write(body: &OutgoingBody, bytes: &[u8]) {
    let Ok(stream) = body.write() else {
        return;
    };
    for chunk in bytes.chunks(ONE_WRITE) {
        if stream.blocking_write_and_flush(chunk).is_err() {
            return;
        }
    }
}
