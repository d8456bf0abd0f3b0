//! `GET /health`: can this instance reach Redis, and was MySQL reachable a moment ago?
//!
//! Anyone may ask, so MySQL is pinged by one request a second at most (a probe in Redis);
//! the others report what that ping found in the last few seconds, or `unknown` before
//! any did. Without Redis nothing sells, and nothing would bound the pings: MySQL is then
//! not asked.

use serde_json::json;

use crate::config;
use crate::db::Db;
use crate::http::Reply;
use crate::request_log;
use seckill_core::sale::Probe;
use seckill_core::ApiError;

use crate::sale::Sale;

pub fn check() -> Result<Reply, ApiError> {
    let sale = config::redis_url().and_then(|url| {
        let sale = Sale::connect(&url)?;
        sale.ping()?;
        Ok(sale)
    });
    let (redis, mysql) = match &sale {
        Ok(sale) => ("ok", mysql_state(sale)),
        Err(_) => ("down", "unknown"),
    };
    if redis == "ok" && mysql != "down" {
        let mut body = json!({ "status": "ok", "redis": redis, "mysql": mysql });
        // Sales Redis was found behind MySQL on: each answers 503 until an admin syncs it.
        match sale.as_ref().map(Sale::stale_vouchers) {
            Ok(Ok(stale)) if !stale.is_empty() => body["stale_vouchers"] = json!(stale),
            Ok(Err(error)) => request_log::note_cause(&error),
            _ => {}
        }
        return Reply::json(200, body);
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

/// `ok`, `down`, or `unknown` while another request's ping is under way.
fn mysql_state(sale: &Sale) -> &'static str {
    let name = |ok: bool| if ok { "ok" } else { "down" };
    match sale.may_ask_mysql(Probe::Health) {
        Ok(true) => {
            let ok = config::mysql_url()
                .and_then(|url| Db::connect(&url)?.ping().map_err(ApiError::from))
                .is_ok();
            if let Err(error) = sale.remember_mysql_health(ok) {
                request_log::note_cause(format!("MySQL's health not kept in Redis: {error}"));
            }
            name(ok)
        }
        Ok(false) => match sale.mysql_health() {
            Ok(Some(ok)) => name(ok),
            Ok(None) => "unknown",
            Err(error) => {
                request_log::note_cause(&error);
                "unknown"
            }
        },
        Err(error) => {
            request_log::note_cause(&error);
            "unknown"
        }
    }
}
