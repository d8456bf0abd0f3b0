//! seckill: the flash-sale ("秒杀") purchase handler, as one Spin HTTP component.
//!
//! Every request takes one path: the build's entry point (`entry`: `p1` for Spin 2's
//! interfaces, `p3` for Spin 4's WASIp3) hands it to [`serve`], `http` reads its head, `router`
//! picks the handler, `auth` says who is calling, `http` reads the body of a route that
//! takes one (within a deadline), the handler (`handlers`: vouchers,
//! orders, events, health, metrics) validates its input and calls its action (`actions`,
//! a file per resource too), which does the work through `storage` (`redis`: the sale's
//! Lua scripts; `db`: MySQL, the stock and the orders) and returns rows or terms, and
//! `http` writes the JSON answer the handler makes of them. Each build's host interfaces (Spin's Redis, MySQL,
//! variables) are its adapter in `platform`, under the names the storage uses. `request_log` writes one line per request. The decisions themselves
//! (admission, the group commit, what each outcome answers) are Spin-free, in
//! `seckill_core` (`core/`), which the tests drive too. All coordination lives in Redis:
//! what an instance keeps between requests (the p3 build's Redis connection and
//! variables) is a cache, never state.

mod actions;
mod auth;
mod config;
mod cors;
mod entry;
mod error;
mod handlers;
mod http;
mod platform;
#[cfg(test)]
mod proptests;
mod request_log;
mod router;
mod storage;

use std::time::Instant;

use futures::future::LocalBoxFuture;
use futures::Stream;

use http::{Head, Reply};
use request_log::{Finish, Ids, Trail};

/// A request served: its answer, and what follows once it has been sent (the work after
/// the answer, then the log line).
struct Served {
    reply: Reply,
    after: LocalBoxFuture<'static, ()>,
}

/// Serves the request whose head is `head` and whose body `body` streams.
async fn serve<E>(head: Head, body: impl Stream<Item = Result<Vec<u8>, E>>) -> Served {
    let started = Instant::now();
    let mut trail = Trail::default();
    let (reply, then, ids, status, error) = request_log::within(&mut trail, async {
        config::load().await;
        // Before the body is read, so that an answer refusing the body carries them too.
        let ids = Ids::from_headers(head.single("x-request-id"), head.single("traceparent"));
        let cors = cors::Cors::of(&head);
        // Routed and its caller let in from the head: the body is read only on a route
        // that takes one, by a caller it lets in.
        let routed = match http::head(&head) {
            Ok(request) => {
                let body = http::body(&head, body);
                router::route(request, body, &cors, &auth::Variables).await
            }
            Err(error) => Err(error.into()),
        };
        // Where the request ends: a backend's failure is logged here, once, and answered
        // as the plain 503 that names it.
        let mut reply = routed.map_err(|failure| {
            if let Some(cause) = failure.cause() {
                request_log::note_cause(cause);
            }
            failure.api()
        });
        let (status, error) = match &reply {
            Ok(reply) if reply.status >= 400 => (
                reply.status,
                Some(reply.error_code().unwrap_or("error").to_string()),
            ),
            Ok(reply) => (reply.status, None),
            Err(error) => (error.status(), Some(error.code().to_string())),
        };
        let then = reply.as_mut().ok().and_then(|reply| reply.then.take());
        let reply = http::respond(reply, cors.headers(), &ids.request_id);
        (reply, then, ids, status, error)
    })
    .await;
    let latency = started.elapsed();
    let method = head.method;
    // The log line waits for the work after the answer, so that it names what went wrong
    // there too; its latency is the client's.
    let after = Box::pin(async move {
        request_log::within(&mut trail, async {
            if let Some(then) = then {
                then.run().await;
            }
            request_log::write(
                &ids,
                Finish {
                    method: &method,
                    status,
                    error: error.as_deref(),
                    latency,
                },
            );
        })
        .await
    });
    Served { reply, after }
}
