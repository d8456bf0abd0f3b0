//! The host's Redis floor, for the benchmark only (never a route of the product):
//! `GET /ping` opens a Redis connection, as every seckill request that uses Redis does,
//! and sends one PING; nothing a request that touches Redis does can be cheaper. Any
//! other path answers 404 without touching Redis: this component's own host floor, so
//! the benchmark can tell the cost of the connection from the cost of the instance.

use spin_sdk::http::{IncomingRequest, Response};
use spin_sdk::http_component;
use spin_sdk::redis::{Connection, RedisResult};
use spin_sdk::variables;

// Async and taking the raw request, like the seckill component's handler, so the two
// export the same shape of wasi:http handler.
#[http_component]
async fn handle(request: IncomingRequest) -> Response {
    if request.path_with_query().as_deref() != Some("/ping") {
        return Response::new(404, "");
    }
    match ping() {
        Ok(()) => Response::new(200, "PONG"),
        Err(error) => Response::new(503, error),
    }
}

fn ping() -> Result<(), String> {
    let url = variables::get("redis_url").map_err(|e| e.to_string())?;
    let redis = Connection::open(&url).map_err(|e| e.to_string())?;
    match redis
        .execute("PING", &[])
        .map_err(|e| e.to_string())?
        .as_slice()
    {
        [RedisResult::Status(pong)] if pong == "PONG" => Ok(()),
        other => Err(format!("unexpected PING reply {other:?}")),
    }
}
