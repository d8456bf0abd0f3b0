//! The p2 floor: every request opens its own connections.

use spin_sdk::http::{IncomingRequest, Response, ResponseOutparam};
use spin_sdk::http_component;
use spin_sdk::{redis, variables};

use crate::{open_mysql, select_one, Route};

// Async, taking the raw request and answering in one write as the seckill component
// does, so that a floor measures Spin, not Nagle's algorithm.
#[http_component]
async fn handle(request: IncomingRequest, out: ResponseOutparam) {
    let path = request.path_with_query().unwrap_or_default();
    let reply = match Route::of(&path) {
        Route::Redis => ping(),
        Route::Mysql => variable("mysql_url").and_then(|url| select_one(&open_mysql(&url)?)),
        Route::MysqlKept => Err("no MySQL connection is kept in this build".into()),
        Route::Variables => variable("redis_url").and(variable("mysql_url")).map(drop),
        Route::Nothing => Ok(()),
    };
    let response = match reply {
        Ok(()) => Response::new(200, ""),
        Err(error) => Response::new(503, error),
    };
    seckill_answer::send(out, response);
}

fn ping() -> Result<(), String> {
    let redis = redis::Connection::open(&variable("redis_url")?).map_err(|e| e.to_string())?;
    match redis
        .execute("PING", &[])
        .map_err(|e| e.to_string())?
        .as_slice()
    {
        [redis::RedisResult::Status(pong)] if pong == "PONG" => Ok(()),
        other => Err(format!("unexpected PING reply {other:?}")),
    }
}

fn variable(name: &str) -> Result<String, String> {
    variables::get(name).map_err(|e| e.to_string())
}
