//! `GET /health`: can this instance reach Redis, and was MySQL reachable a moment ago?
//!
//! Anyone may ask, so MySQL is pinged by one request a second at most (a probe in Redis);
//! the others report what that ping found in the last few seconds, or `unknown` before
//! any did. Without Redis nothing sells, and nothing would bound the pings: MySQL is then
//! not asked. Which vouchers wait for a sync or a heal, and how MySQL's reads behave, is
//! told to operators only (the admin or the metrics token): a balancer needs up or down.

use std::time::SystemTime;

use serde_json::json;

use crate::auth::{self, Variables};
use crate::error::Failure;
use crate::http::{Answer, Request};
use crate::request_log;
use crate::storage::backends::Connections;
use seckill_core::sale::{
    Finding, KeepFinding, Members, Ping, Probe, ReadFinding, TakeProbe, MYSQL_BEHIND, STALE,
};

use crate::storage::redis::Redis;

/// `GET /health/live`: Spin runs the component, and nothing else is asked: a liveness
/// probe that restarts a host only when it stops answering, never for a backend that is
/// down (every host would be restarted for it). `GET /health` is the readiness probe.
pub fn live() -> Result<Answer, Failure> {
    Answer::json(200, json!({ "status": "live" }))
}

pub async fn check(request: &Request, connections: Connections) -> Result<Answer, Failure> {
    let connection = async {
        let redis = connections.redis().await?;
        redis.call(&Ping).await?;
        Ok::<_, Failure>(redis)
    }
    .await;
    let (redis, mysql) = match &connection {
        Ok(connection) => ("ok", mysql_state(connection, &connections).await),
        Err(_) => ("down", "unknown"),
    };
    if redis == "ok" && mysql != "down" {
        let mut body = json!({ "status": "ok", "redis": redis, "mysql": mysql });
        // Sales Redis was found behind MySQL on (each answers 503 until an admin syncs
        // it), and sales MySQL was found behind Redis on (each heals itself; meanwhile
        // buyers were told of orders MySQL lacks, so the service is not `ok`).
        let operator = auth::is_operator(
            request.authorization.as_deref(),
            &Variables,
            SystemTime::now(),
        );
        if let (Ok(redis), true) = (&connection, operator) {
            for (set, field) in [
                (STALE, "stale_vouchers"),
                (MYSQL_BEHIND, "mysql_behind_vouchers"),
            ] {
                match redis.call(&Members { set }).await {
                    Ok(vouchers) if !vouchers.is_empty() => body[field] = json!(vouchers),
                    Err(error) => request_log::note_cause(&error),
                    _ => {}
                }
            }
            // A Galera node that does not wait for the cluster's commits: a buyer's read
            // right after her 201 may miss her order (docs/operations.md).
            if let Ok(Some(false)) = redis.call(&ReadFinding(Finding::MysqlReadsFresh)).await {
                body["mysql_reads"] = json!("may_lag");
            }
            if body.get("mysql_behind_vouchers").is_some() || body.get("mysql_reads").is_some() {
                body["status"] = json!("degraded");
            }
        }
        return Answer::json(200, body);
    }
    let down: Vec<&str> = [("redis", redis), ("mysql", mysql)]
        .iter()
        .filter(|(_, state)| *state == "down")
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

/// `ok`, `down`, or `unknown` while another request's ping is under way.
async fn mysql_state(redis: &Redis, connections: &Connections) -> &'static str {
    let name = |ok: bool| if ok { "ok" } else { "down" };
    match redis
        .call(&TakeProbe {
            probe: Probe::Health,
        })
        .await
    {
        Ok(true) => {
            let reads_fresh = mysql_reads_fresh(connections).await;
            let ok = reads_fresh.is_ok();
            // Whether reads wait is known only of a MySQL that answered.
            let found = [
                (Finding::MysqlAnswers, Some(ok)),
                (Finding::MysqlReadsFresh, reads_fresh.ok()),
            ];
            for (finding, yes) in found {
                let Some(yes) = yes else { continue };
                if let Err(error) = redis.call(&KeepFinding { finding, yes }).await {
                    request_log::note_cause(format!(
                        "/health finding {finding:?} not kept in Redis: {error}"
                    ));
                }
            }
            name(ok)
        }
        Ok(false) => match redis.call(&ReadFinding(Finding::MysqlAnswers)).await {
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

/// MySQL answers, and says whether its reads wait for a cluster's commits.
async fn mysql_reads_fresh(connections: &Connections) -> Result<bool, Failure> {
    Ok(connections.mysql().await?.reads_fresh().await?)
}
