//! The limits measured from native clients, without the component or its host: the
//! admission script by EVALSHA on kept Redis connections, and the purchase's prepared
//! CALL on fresh or kept MySQL connections. The loop is wrk's: each of C workers sends
//! its next call as soon as the previous one is answered, for a fixed time.
//!
//! Why not redis-benchmark: its `__rand_int__` draws every placeholder of a command
//! independently, so it cannot send a buyer's id together with that buyer's lock key,
//! which the admitted case needs; one loop for both cases keeps them comparable.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use mysql_async::prelude::Queryable;
use mysql_async::{Opts, Pool};
use redis::aio::MultiplexedConnection;
use redis::Value;

use seckill_tests::backends::{self, key};

use crate::results::{Latency, Run};

/// One client of a closed loop.
pub trait Worker: Send + 'static {
    /// Makes one call; returns its outcome as the server put it.
    fn call(&mut self) -> impl Future<Output = Result<String>> + Send;
}

/// Runs every worker until `duration` is up. A failed call counts as outcome "error"
/// (the first error's message is printed) and the worker goes on.
pub async fn closed_loop<W: Worker>(workers: Vec<W>, duration: Duration) -> Result<Run> {
    let start = Instant::now();
    let deadline = start + duration;
    let reported = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = workers
        .into_iter()
        .map(|mut worker| {
            let reported = reported.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut outcomes = BTreeMap::<String, u64>::new();
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    let outcome = match worker.call().await {
                        Ok(outcome) => outcome,
                        Err(error) => {
                            if !reported.swap(true, Ordering::Relaxed) {
                                eprintln!("seckill-bench: {error:#} (and maybe more)");
                            }
                            "error".to_string()
                        }
                    };
                    latencies.push(sent.elapsed().as_micros() as u64);
                    *outcomes.entry(outcome).or_default() += 1;
                }
                (latencies, outcomes)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut outcomes = BTreeMap::new();
    for task in tasks {
        let (worker_latencies, worker_outcomes) = task.await?;
        latencies.extend(worker_latencies);
        for (outcome, n) in worker_outcomes {
            *outcomes.entry(outcome).or_default() += n;
        }
    }
    Ok(Run {
        requests: latencies.len() as u64,
        seconds: start.elapsed().as_secs_f64(),
        latency: Latency::of(&mut latencies),
        outcomes,
        socket_errors: 0,
    })
}

/// Distinct buyers (and order ids) for calls that must each be a new purchase.
#[derive(Clone)]
pub struct Ids(Arc<AtomicU64>);

impl Ids {
    pub fn starting_at(first: u64) -> Ids {
        Ids(Arc::new(AtomicU64::new(first)))
    }

    fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// Who runs admission: always the same buyer, or a new one each call.
#[derive(Clone)]
pub enum Buyer {
    Same(u64),
    Each(Ids),
}

/// `lua/admission.lua` by EVALSHA, with the keys and arguments `src/sale.rs` sends.
pub struct Admission {
    redis: MultiplexedConnection,
    sha: String,
    voucher_id: u64,
    buyer: Buyer,
}

/// The admission script's SHA1, after making sure Redis has it cached.
pub async fn load_admission_script() -> Result<String> {
    let sha = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(include_str!("../../../lua/admission.lua"))
        .query_async(&mut backends::redis().await)
        .await?;
    Ok(sha)
}

impl Admission {
    /// A worker with its own connection, kept for the whole run.
    pub async fn connect(sha: &str, voucher_id: u64, buyer: Buyer) -> Admission {
        Admission {
            redis: backends::redis().await,
            sha: sha.to_string(),
            voucher_id,
            buyer,
        }
    }
}

impl Worker for Admission {
    async fn call(&mut self) -> Result<String> {
        let user = match &self.buyer {
            Buyer::Same(user) => *user,
            Buyer::Each(ids) => ids.next(),
        };
        // A lock token the length of the uuid the component sends.
        let token = format!("{user:036}");
        let reply: Value = redis::cmd("EVALSHA")
            .arg(&self.sha)
            .arg(5)
            .arg(key(self.voucher_id, "voucher"))
            .arg(key(self.voucher_id, "buyers"))
            .arg(key(self.voucher_id, "pending"))
            .arg(key(self.voucher_id, &format!("lock:{user}")))
            .arg("seckill:order-seq")
            .arg(user)
            .arg(token)
            .arg(5000)
            .query_async(&mut self.redis)
            .await?;
        match reply {
            Value::Array(items) => match items.first() {
                Some(Value::BulkString(tag)) => Ok(String::from_utf8_lossy(tag).into_owned()),
                other => anyhow::bail!("admission replied {other:?}"),
            },
            other => anyhow::bail!("admission replied {other:?}"),
        }
    }
}

const PURCHASE: &str = "CALL seckill_purchase(?, ?, ?)";

/// The purchase's statement, each call a new buyer with a new order id.
pub struct Purchase {
    mysql: Connection,
    voucher_id: u64,
    ids: Ids,
}

enum Connection {
    /// A new pool and connection per call, dropped after it: what Spin's MySQL host
    /// does for every `open` (and the test host with it).
    Fresh(Opts),
    /// One connection for the whole run; the statement is prepared once.
    Kept(mysql_async::Conn),
}

impl Purchase {
    pub fn fresh(voucher_id: u64, ids: Ids) -> Result<Purchase> {
        let opts = Opts::from_url(backends::MYSQL_URL)?;
        Ok(Purchase {
            mysql: Connection::Fresh(opts),
            voucher_id,
            ids,
        })
    }

    pub async fn kept(voucher_id: u64, ids: Ids) -> Result<Purchase> {
        let conn = mysql_async::Conn::from_url(backends::MYSQL_URL).await?;
        Ok(Purchase {
            mysql: Connection::Kept(conn),
            voucher_id,
            ids,
        })
    }
}

impl Worker for Purchase {
    async fn call(&mut self) -> Result<String> {
        let id = self.ids.next();
        let params = (id, id, self.voucher_id);
        let row: Option<(String, Option<u64>)> = match &mut self.mysql {
            Connection::Fresh(opts) => {
                let pool = Pool::new(opts.clone());
                let mut conn = pool.get_conn().await?;
                drop(pool);
                conn.exec_first(PURCHASE, params).await?
            }
            Connection::Kept(conn) => conn.exec_first(PURCHASE, params).await?,
        };
        Ok(row.context("seckill_purchase returned no row")?.0)
    }
}
