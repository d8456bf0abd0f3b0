//! seckill: the flash-sale ("秒杀") purchase handler, as one Spin HTTP component.
//!
//! Every request takes one path: `http` reads it, `router` picks the handler, `auth` says
//! who is calling, the handler (`vouchers`, `orders`, `health`) validates its input and
//! does the work through `sale` (Redis: admission and the queue of admitted purchases),
//! `group_commit` (draining that queue into MySQL) and `db` (MySQL: the stock and the
//! orders), and `http` writes the JSON answer.
//! Instances keep nothing between requests: all coordination lives in Redis.

mod auth;
mod config;
mod cors;
mod db;
mod error;
mod group_commit;
mod health;
mod http;
mod order_id;
mod orders;
#[cfg(test)]
mod proptests;
mod router;
mod sale;
mod scripts;
mod vouchers;

use spin_sdk::http::{IncomingRequest, Response};
use spin_sdk::http_component;

#[http_component]
async fn handle(request: IncomingRequest) -> Response {
    // Before the body is read, so that an answer refusing the body carries CORS too.
    let cors = cors::Cors::of(&request);
    let reply = http::read(request)
        .await
        .and_then(|request| router::route(&request, &cors));
    http::respond(reply, &cors)
}
