//! Whether this instance reaches Redis, and whether MySQL was reachable a moment ago.
//!
//! Anyone may ask, so MySQL is pinged by one request a second at most (a probe in Redis);
//! the others take what that ping found in the last few seconds, or nothing before any
//! did. Without Redis nothing sells, and nothing would bound the pings: MySQL is then not
//! asked. Which vouchers wait for a sync or a heal, and how MySQL's reads behave, is read
//! for operators only: a balancer needs up or down.

use seckill_core::sale::{
    Finding, KeepFinding, Members, Ping, Probe, ReadFinding, TakeProbe, MYSQL_BEHIND, STALE,
};
use seckill_core::BucketId;

use crate::error::Failure;
use crate::request_log;
use crate::storage::connections::Connections;
use crate::storage::redis::Redis;

/// What is known of a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Ok,
    Down,
    /// Not asked: Redis is down, or another request's ping is under way and none found
    /// anything lately.
    Unknown,
}

/// The backends as this request found them, with what operators are told of a service
/// that is up.
pub struct Health {
    pub redis: Reach,
    pub mysql: Reach,
    /// `None` for anyone but an operator, and for a service down.
    pub detail: Option<Detail>,
}

/// The sales Redis was found behind MySQL on (each answers 503 until an admin syncs it),
/// the sales MySQL was found behind Redis on (each heals itself; meanwhile buyers were
/// told of orders MySQL lacks), and whether MySQL's reads may miss a commit just made.
pub struct Detail {
    pub stale: Vec<BucketId>,
    pub mysql_behind: Vec<BucketId>,
    /// A Galera node that does not wait for the cluster's commits: a buyer's read right
    /// after her 201 may miss her order (docs/operations.md).
    pub mysql_reads_may_lag: bool,
}

impl Reach {
    /// As `/health` names it.
    pub fn name(self) -> &'static str {
        match self {
            Reach::Ok => "ok",
            Reach::Down => "down",
            Reach::Unknown => "unknown",
        }
    }

    fn of(ok: bool) -> Reach {
        if ok {
            Reach::Ok
        } else {
            Reach::Down
        }
    }
}

impl Health {
    /// Whether the service can sell: Redis answers, and MySQL was not found down.
    pub fn up(&self) -> bool {
        self.redis == Reach::Ok && self.mysql != Reach::Down
    }
}

impl Detail {
    /// Buyers may have been told of orders MySQL lacks, or may miss their own: the service
    /// is not wholly well.
    pub fn degraded(&self) -> bool {
        !self.mysql_behind.is_empty() || self.mysql_reads_may_lag
    }
}

/// Pings Redis, and MySQL in its turn; the detail only when the service is up and
/// `operator` says the caller is one (asked only then: a credential costs host calls).
pub async fn check(connections: &Connections, operator: impl FnOnce() -> bool) -> Health {
    let connection = async {
        let redis = connections.redis().await?;
        redis.call(&Ping).await?;
        Ok::<_, Failure>(redis)
    }
    .await;
    let Ok(redis) = connection else {
        return Health {
            redis: Reach::Down,
            mysql: Reach::Unknown,
            detail: None,
        };
    };
    let mut health = Health {
        redis: Reach::Ok,
        mysql: mysql_state(redis, connections).await,
        detail: None,
    };
    if health.up() && operator() {
        health.detail = Some(detail(redis).await);
    }
    health
}

/// What operators are told; a set Redis fails to read is left out, and logged.
async fn detail(redis: &Redis) -> Detail {
    let members = |set| async move {
        redis.call(&Members { set }).await.unwrap_or_else(|error| {
            request_log::note_cause(&error);
            Vec::new()
        })
    };
    let stale = members(STALE).await;
    let mysql_behind = members(MYSQL_BEHIND).await;
    let fresh = redis.call(&ReadFinding(Finding::MysqlReadsFresh)).await;
    Detail {
        stale,
        mysql_behind,
        mysql_reads_may_lag: matches!(fresh, Ok(Some(false))),
    }
}

/// MySQL pinged when this request takes the probe, else what the last ping found.
async fn mysql_state(redis: &Redis, connections: &Connections) -> Reach {
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
            Reach::of(ok)
        }
        Ok(false) => match redis.call(&ReadFinding(Finding::MysqlAnswers)).await {
            Ok(Some(ok)) => Reach::of(ok),
            Ok(None) => Reach::Unknown,
            Err(error) => {
                request_log::note_cause(&error);
                Reach::Unknown
            }
        },
        Err(error) => {
            request_log::note_cause(&error);
            Reach::Unknown
        }
    }
}

/// MySQL answers, and says whether its reads wait for a cluster's commits.
async fn mysql_reads_fresh(connections: &Connections) -> Result<bool, Failure> {
    Ok(connections.mysql().await?.reads_fresh().await?)
}
