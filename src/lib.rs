//! seckill: the flash-sale ("秒杀") purchase handler, as one Spin HTTP component.
//!
//! Every request takes one path: `http` reads it, `router` picks the handler, `auth` says
//! who is calling, the handler (`vouchers`, `orders`, `health`, `metrics`) validates its
//! input and does the work through `redis` (the sale's Lua scripts) and `db` (MySQL: the stock and the
//! orders), and `http` writes the JSON answer. `request_log` writes one line per
//! request. The decisions themselves (admission, the group commit, what each outcome
//! answers) are Spin-free, in `seckill_core` (`core/`), which the tests drive too.
//! Instances keep nothing between requests: all coordination lives in Redis.

mod auth;
mod config;
mod cors;
mod db;
mod error;
mod events;
mod health;
mod http;
mod metrics;
mod orders;
#[cfg(test)]
mod proptests;
mod redis;
mod request_log;
mod returns;
mod router;
mod vouchers;

use std::time::Instant;

use spin_sdk::http::{IncomingRequest, ResponseOutparam};
use spin_sdk::http_component;

use request_log::{Finish, Ids};

#[http_component]
async fn handle(request: IncomingRequest, out: ResponseOutparam) {
    let started = Instant::now();
    // Before the body is read, so that an answer refusing the body carries them too.
    let ids = Ids::of(&request);
    let cors = cors::Cors::of(&request);
    let method = request.method().to_string();
    let mut reply = match http::read(request).await {
        Ok(request) => router::route(&request, &cors).await,
        Err(error) => Err(error),
    };
    let (status, error) = match &reply {
        Ok(reply) if reply.status >= 400 => (
            reply.status,
            Some(reply.error_code().unwrap_or("error").to_string()),
        ),
        Ok(reply) => (reply.status, None),
        Err(error) => (error.status(), Some(error.code().to_string())),
    };
    let then = reply.as_mut().ok().and_then(|reply| reply.then.take());
    seckill_answer::send(out, http::respond(reply, cors.headers(), &ids.request_id));
    let latency = started.elapsed();
    // The log line waits for the work after the answer, so that it names what went wrong
    // there too; its latency is the client's.
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
}
