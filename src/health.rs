//! `GET /health`: can this instance reach Redis and MySQL right now?

use serde_json::json;

use crate::config;
use crate::db::Db;
use crate::error::ApiError;
use crate::http::Reply;
use crate::sale::Sale;

pub fn check() -> Result<Reply, ApiError> {
    let redis = config::redis_url().and_then(|url| {
        Sale::connect(&url)
            .and_then(|sale| sale.ping())
            .map_err(ApiError::from)
    });
    let mysql = config::mysql_url().and_then(|url| {
        Db::connect(&url)
            .and_then(|db| db.ping())
            .map_err(ApiError::from)
    });
    let state = |result: &Result<(), ApiError>| if result.is_ok() { "ok" } else { "down" };
    let (redis, mysql) = (state(&redis), state(&mysql));
    if redis == "ok" && mysql == "ok" {
        return Reply::json(
            200,
            json!({ "status": "ok", "redis": redis, "mysql": mysql }),
        );
    }
    let down: Vec<&str> = [("redis", redis), ("mysql", mysql)]
        .iter()
        .filter(|(_, state)| *state == "down")
        .map(|(name, _)| *name)
        .collect();
    Reply::json(
        503,
        json!({
            "status": "unavailable",
            "redis": redis,
            "mysql": mysql,
            "error": "unavailable",
            "message": format!("unreachable: {}", down.join(", ")),
        }),
    )
}
