//! Spin's own floors, for the benchmark only (never a route of the product). Each route
//! does the least a seckill request of its kind must do, so nothing seckill does on that
//! path can be cheaper under the same Spin:
//!
//! - `GET /redis` opens a Redis connection (from the `redis_url` variable, as seckill
//!   does) and sends one PING: the floor of a request that uses Redis;
//! - `GET /mysql` opens a MySQL connection (from `mysql_url`) and runs `SELECT 1`: the
//!   floor of a request that uses MySQL;
//! - `GET /variables` reads the two variables and answers like the floor below, so that
//!   the difference is what looking variables up costs;
//! - anything else answers 200 at once, with no backend and no variable: Spin's floor.

use spin_sdk::http::{IncomingRequest, Response, ResponseOutparam};
use spin_sdk::http_component;
use spin_sdk::{mysql, redis, variables};

// Async, taking the raw request and answering in one write as the seckill component
// does, so that a floor measures Spin, not Nagle's algorithm.
#[http_component]
async fn handle(request: IncomingRequest, out: ResponseOutparam) {
    let path = request.path_with_query().unwrap_or_default();
    let reply = match path.as_str() {
        "/redis" => ping(),
        "/mysql" => select_one(),
        "/variables" => ["redis_url", "mysql_url"]
            .into_iter()
            .try_for_each(|name| variables::get(name).map(drop).map_err(|e| e.to_string())),
        _ => Ok(()),
    };
    let response = match reply {
        Ok(()) => Response::new(200, ""),
        Err(error) => Response::new(503, error),
    };
    seckill_answer::send(out, response);
}

fn ping() -> Result<(), String> {
    let url = variables::get("redis_url").map_err(|e| e.to_string())?;
    let redis = redis::Connection::open(&url).map_err(|e| e.to_string())?;
    match redis
        .execute("PING", &[])
        .map_err(|e| e.to_string())?
        .as_slice()
    {
        [redis::RedisResult::Status(pong)] if pong == "PONG" => Ok(()),
        other => Err(format!("unexpected PING reply {other:?}")),
    }
}

fn select_one() -> Result<(), String> {
    let url = variables::get("mysql_url").map_err(|e| e.to_string())?;
    let mysql = mysql::Connection::open(&url).map_err(|e| e.to_string())?;
    let rows = mysql
        .query("SELECT 1", &[])
        .map_err(|e| e.to_string())?
        .rows;
    match rows.as_slice() {
        [row] if row.len() == 1 => Ok(()),
        other => Err(format!("unexpected SELECT 1 reply {other:?}")),
    }
}
