//! The request log: one JSON line per request on stdout, which Spin keeps in its log
//! (`<log dir>/seckill_stdout.txt`, and its own stdout). The line names the request
//! (`request_id`, the server's own, echoed in `X-Request-Id`; the client's
//! `client_request_id` and `trace_id` beside it), what it asked (`method`, `route`,
//! `voucher_id`, `user_id`), what it got (`status`, `outcome`, `latency_us`) and, on a
//! failure, why (`cause`, one line); `mysql_retries` counts the MySQL statements run again
//! after a conflict rolled them back (a deadlock, or a Galera certification failure). Nothing secret is written: no token, no variable.
//!
//! The layers below the router note what they learn in the request's trail as they go
//! (the voucher, the caller, the cause of a failure). An instance of the p3 build serves
//! several requests at once, interleaved at every await: [`within`] puts a request's own
//! trail in place each time its work runs.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use seckill_core::VoucherId;

/// Longest request id of a client's that is logged.
const MAX_ID_LEN: usize = 128;
/// Longest cause written: the first line of an error, cut to this.
const MAX_CAUSE_LEN: usize = 300;

/// What the request's handling noted on its way.
#[derive(Default)]
pub struct Trail {
    route: Option<&'static str>,
    /// What the route calls its success (`ordered`, `created`, ...).
    success: Option<&'static str>,
    /// The sale a route names or the bucket an order settled in took from: either, so a
    /// `VoucherId`.
    voucher_id: Option<VoucherId>,
    user_id: Option<String>,
    causes: Vec<String>,
    /// MySQL statements run again after a conflict rolled them back.
    mysql_retries: u32,
}

thread_local! {
    static TRAIL: RefCell<Trail> = RefCell::new(Trail::default());
}

/// Runs `work` with `trail` as the trail its notes go to.
pub async fn within<T>(trail: &mut Trail, work: impl Future<Output = T>) -> T {
    Within {
        trail,
        work: Box::pin(work),
    }
    .await
}

struct Within<'a, F> {
    trail: &'a mut Trail,
    work: Pin<Box<F>>,
}

impl<F: Future> Future for Within<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let swap = |trail: &mut Trail| {
            TRAIL.with(|current| std::mem::swap(&mut *current.borrow_mut(), trail))
        };
        swap(this.trail);
        let poll = this.work.as_mut().poll(cx);
        swap(this.trail);
        poll
    }
}

/// The route template the request matched, such as `/vouchers/{id}/orders`.
pub fn note_route(route: &'static str) {
    TRAIL.with(|trail| trail.borrow_mut().route = Some(route));
}

/// The outcome to log if the request succeeds.
pub fn note_success(outcome: &'static str) {
    TRAIL.with(|trail| trail.borrow_mut().success = Some(outcome));
}

pub fn note_voucher(voucher_id: impl Into<VoucherId>) {
    let voucher_id = voucher_id.into();
    TRAIL.with(|trail| trail.borrow_mut().voucher_id = Some(voucher_id));
}

pub fn note_user(user_id: impl ToString) {
    TRAIL.with(|trail| trail.borrow_mut().user_id = Some(user_id.to_string()));
}

/// Why something failed, as the operator needs it: an answer's own message tells the
/// client less (`unavailable: mysql`).
pub fn note_cause(cause: impl ToString) {
    let cause = cause.to_string();
    // Errors of the host's drivers can carry a backtrace: its first line says it.
    let mut line: String = cause.lines().next().unwrap_or_default().trim().to_string();
    if line.len() > MAX_CAUSE_LEN {
        let mut end = MAX_CAUSE_LEN;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
    }
    TRAIL.with(|trail| trail.borrow_mut().causes.push(line));
}

/// A MySQL statement that a conflict rolled back is run again (`storage::db`).
pub fn note_mysql_retry() {
    TRAIL.with(|trail| trail.borrow_mut().mysql_retries += 1);
}

/// How the request is known: the server's own id for it, and what the client named it
/// (its `X-Request-Id`, the W3C trace it belongs to), if anything.
#[derive(Debug, PartialEq, Eq)]
pub struct Ids {
    /// Always new: a client's id is never taken as the server's, so nobody can give her
    /// request another's id, in the log or in a support search.
    pub request_id: String,
    pub client_request_id: Option<String>,
    pub trace_id: Option<String>,
}

impl Ids {
    /// A new id, with the client's `X-Request-Id` when it is a sane token and the trace
    /// id of a valid `traceparent`.
    pub fn from_headers(request_id: Option<String>, traceparent: Option<String>) -> Ids {
        Ids {
            request_id: uuid::Uuid::new_v4().simple().to_string(),
            client_request_id: request_id.filter(|id| is_token(id)),
            trace_id: traceparent.as_deref().and_then(trace_id),
        }
    }
}

/// Characters that cannot break a log line or a header, and not too many of them.
fn is_token(id: &str) -> bool {
    (1..=MAX_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:@/+=".contains(&b))
}

/// The trace id of a version-00 `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), unless
/// it is the invalid all-zero id.
fn trace_id(traceparent: &str) -> Option<String> {
    let parts: Vec<&str> = traceparent.trim().split('-').collect();
    let hex = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    match parts.as_slice() {
        [version, trace, parent, flags]
            if *version == "00"
                && hex(trace, 32)
                && hex(parent, 16)
                && hex(flags, 2)
                && trace.bytes().any(|b| b != b'0') =>
        {
            Some(trace.to_string())
        }
        _ => None,
    }
}

#[derive(Serialize)]
struct Line<'a> {
    ts: String,
    request_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_request_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<&'a str>,
    method: &'a str,
    route: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    voucher_id: Option<VoucherId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user_id: Option<String>,
    status: u16,
    outcome: &'a str,
    latency_us: u128,
    #[serde(skip_serializing_if = "Option::is_none")]
    cause: Option<String>,
    #[serde(skip_serializing_if = "is_zero")]
    mysql_retries: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What the request came to.
pub struct Finish<'a> {
    pub method: &'a str,
    pub status: u16,
    /// The error code of a failure; `None` for a success.
    pub error: Option<&'a str>,
    pub latency: Duration,
}

/// Writes the request's line, with what its trail noted.
pub fn write(ids: &Ids, finish: Finish) {
    let trail = TRAIL.with(|trail| trail.take());
    let line = Line {
        ts: DateTime::<Utc>::from(SystemTime::now()).to_rfc3339_opts(SecondsFormat::Millis, true),
        request_id: &ids.request_id,
        client_request_id: ids.client_request_id.as_deref(),
        trace_id: ids.trace_id.as_deref(),
        method: finish.method,
        route: trail.route.unwrap_or("unmatched"),
        voucher_id: trail.voucher_id,
        user_id: trail.user_id,
        status: finish.status,
        outcome: finish.error.or(trail.success).unwrap_or("ok"),
        latency_us: finish.latency.as_micros(),
        cause: (!trail.causes.is_empty()).then(|| trail.causes.join("; ")),
        mysql_retries: trail.mysql_retries,
    };
    match serde_json::to_string(&line) {
        Ok(line) => println!("{line}"),
        Err(error) => eprintln!("request log: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn new_id(ids: &Ids) -> bool {
        ids.request_id.len() == 32 && ids.request_id.bytes().all(|b| b.is_ascii_hexdigit())
    }

    #[test]
    fn the_server_names_every_request_and_keeps_the_clients_names_apart() {
        let ids = Ids::from_headers(Some("shop-7:abc".into()), Some(TRACEPARENT.into()));
        assert!(new_id(&ids), "{ids:?}");
        assert_eq!(ids.client_request_id.as_deref(), Some("shop-7:abc"));
        assert_eq!(
            ids.trace_id.as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        let again = Ids::from_headers(Some("shop-7:abc".into()), Some(TRACEPARENT.into()));
        assert_ne!(again.request_id, ids.request_id);
    }

    #[test]
    fn a_client_request_id_that_could_break_a_line_is_not_logged() {
        for bad in ["", "a b", "x\ny", "\"quoted\"", &"a".repeat(129)] {
            let ids = Ids::from_headers(Some(bad.into()), None);
            assert!(new_id(&ids), "{bad:?}");
            assert_eq!(ids.client_request_id, None, "{bad:?}");
        }
        let longest = "a".repeat(128);
        let ids = Ids::from_headers(Some(longest.clone()), None);
        assert_eq!(ids.client_request_id, Some(longest));
    }

    #[test]
    fn only_a_valid_traceparent_names_a_trace() {
        let bad_parents = [
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "garbage",
        ];
        for parent in bad_parents {
            let ids = Ids::from_headers(None, Some(parent.into()));
            assert_eq!(ids.trace_id, None, "{parent}");
            assert!(new_id(&ids), "{parent}");
        }
    }

    #[test]
    fn requests_served_at_once_keep_their_own_trails() {
        use futures::future::{join, poll_fn};
        // Notes, yielding to the other request between them, as an await on Redis does.
        let work = |name: &'static str| async move {
            for step in 0..3 {
                note_cause(format!("{name} {step}"));
                let mut yielded = false;
                poll_fn(|cx| {
                    if yielded {
                        return Poll::Ready(());
                    }
                    yielded = true;
                    cx.waker().wake_by_ref();
                    Poll::Pending
                })
                .await;
            }
        };
        let (mut a, mut b) = (Trail::default(), Trail::default());
        futures::executor::block_on(join(within(&mut a, work("a")), within(&mut b, work("b"))));
        assert_eq!(a.causes, ["a 0", "a 1", "a 2"]);
        assert_eq!(b.causes, ["b 0", "b 1", "b 2"]);
        assert!(TRAIL.with(|trail| trail.borrow().causes.is_empty()));
    }

    #[test]
    fn a_cause_is_one_bounded_line() {
        note_cause(format!(
            "mysql: broken pipe\n   0: frame\n   1: frame{}",
            "x".repeat(10)
        ));
        note_cause("é".repeat(400));
        let causes = TRAIL.with(|trail| trail.take().causes);
        assert_eq!(causes[0], "mysql: broken pipe");
        assert!(causes[1].len() <= MAX_CAUSE_LEN && causes[1].starts_with('é'));
    }
}
