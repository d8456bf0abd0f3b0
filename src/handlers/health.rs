//! `GET /health`: can this instance reach Redis, and was MySQL reachable a moment ago
//! (`actions::health`, which bounds the pings)? Which vouchers wait for a sync or a heal,
//! and how MySQL's reads behave, is told to operators only (the admin or the metrics
//! token): a balancer needs up or down.

use std::time::SystemTime;

use serde_json::json;

use crate::actions::health::{self, Reach};
use crate::auth::{self, Variables};
use crate::error::Failure;
use crate::http::{Answer, Request};
use crate::storage::connections::Connections;

/// `GET /health/live`: Spin runs the component, and nothing else is asked: a liveness
/// probe that restarts a host only when it stops answering, never for a backend that is
/// down (every host would be restarted for it). `GET /health` is the readiness probe.
pub fn live() -> Result<Answer, Failure> {
    Answer::json(200, json!({ "status": "live" }))
}

pub async fn check(request: &Request, connections: Connections) -> Result<Answer, Failure> {
    let operator = || {
        auth::is_operator(
            request.authorization.as_deref(),
            &Variables,
            SystemTime::now(),
        )
    };
    let health = health::check(&connections, operator).await;
    let (redis, mysql) = (health.redis.name(), health.mysql.name());
    if health.up() {
        let mut body = json!({ "status": "ok", "redis": redis, "mysql": mysql });
        if let Some(detail) = &health.detail {
            for (vouchers, field) in [
                (&detail.stale, "stale_vouchers"),
                (&detail.mysql_behind, "mysql_behind_vouchers"),
            ] {
                if !vouchers.is_empty() {
                    body[field] = json!(vouchers);
                }
            }
            if detail.mysql_reads_may_lag {
                body["mysql_reads"] = json!("may_lag");
            }
            if detail.degraded() {
                body["status"] = json!("degraded");
            }
        }
        return Answer::json(200, body);
    }
    let down: Vec<&str> = [("redis", health.redis), ("mysql", health.mysql)]
        .iter()
        .filter(|(_, reach)| *reach == Reach::Down)
        .map(|(name, _)| *name)
        .collect();
    Answer::json(
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
