//! A crowd of buyers pressing as the sale page does, against a storefront's address (one
//! Spin host, or a balancer over several), and the promises a sale must keep once every
//! buyer has her answer: the multi-host suites and the Redis Cluster suite share them.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use crate::drivers::app::{buyer_token, ADMIN_TOKEN};
use crate::drivers::invariants::SaleRecord;

/// How many presses a buyer makes before she gives up: the sale page's patience.
const MAX_PRESSES: usize = 40;
/// The message of a balancer's own 503 (scripts/cluster.sh's HAProxy).
const BALANCER_BUSY: &str = "every host is busy; retry";

/// A sale's units, buyers and seconds the buyers arrive in: `full` in the soak
/// (`CLUSTER_SOAK`, set by `scripts/test-cluster.sh --soak`), else the `bounded` CI runs.
pub fn size(full: (u64, u64, u64), bounded: (u64, u64, u64)) -> (u64, u64, Duration) {
    let (stock, buyers, seconds) = soak_or(full, bounded);
    (stock, buyers, Duration::from_secs(seconds))
}

/// `full` in the soak, else `bounded`, as [`size`] chooses.
pub fn soak_or<T>(full: T, bounded: T) -> T {
    if std::env::var_os("CLUSTER_SOAK").is_some() {
        full
    } else {
        bounded
    }
}

/// The API at `base` (`http://host:port`), as a storefront calls it.
#[derive(Clone)]
pub struct Storefront {
    base: String,
    client: reqwest::Client,
}

impl Storefront {
    pub fn new(base: impl Into<String>) -> Storefront {
        let client = crate::drivers::app::http_client(Duration::from_secs(30), 512);
        Storefront {
            base: base.into(),
            client,
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> reqwest::Result<(StatusCode, Value)> {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status();
        let body = response.json().await.unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// `POST path` as buyers `base`, `base + 1`, ...: the first `scripts` of them at once,
    /// the next `people` spread evenly over `spread` after, 64 in flight at most, as
    /// fairness runs have them. Their answers, in buyer order.
    pub async fn scripts_then_people(
        &self,
        path: &str,
        base: u64,
        (scripts, people): (u64, u64),
        spread: Duration,
    ) -> Vec<(StatusCode, Value)> {
        let gate = Arc::new(Semaphore::new(64));
        let opened = Instant::now();
        let presses: Vec<_> = (0..scripts + people)
            .map(|i| {
                let at = if i < scripts {
                    opened
                } else {
                    opened + spread.mul_f64((i - scripts) as f64 / people as f64)
                };
                let (front, gate, path) = (self.clone(), gate.clone(), path.to_string());
                tokio::spawn(async move {
                    tokio::time::sleep_until(at.into()).await;
                    let _permit = gate.acquire_owned().await.unwrap();
                    let token = buyer_token(base + i);
                    front.call(Method::POST, &path, &token, None).await.unwrap()
                })
            })
            .collect();
        let mut answers = Vec::new();
        for press in presses {
            answers.push(press.await.unwrap());
        }
        answers
    }

    /// A voucher of `stock` units on sale since a minute ago, for an hour.
    pub async fn create_voucher(&self, stock: u64) -> u64 {
        self.create_bucketed(stock, 1).await
    }

    /// [`Storefront::create_voucher`] with its stock spread over `buckets`.
    pub async fn create_bucketed(&self, stock: u64, buckets: u64) -> u64 {
        let at = |offset| (Utc::now() + chrono::Duration::seconds(offset)).to_rfc3339();
        let body = json!({
            "title": "crowd test voucher",
            "stock": stock,
            "begin_time": at(-60),
            "end_time": at(3600),
            "buckets": buckets,
        });
        let (status, body) = self
            .call(Method::POST, "/vouchers", ADMIN_TOKEN, Some(body))
            .await
            .unwrap();
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["id"].as_u64().unwrap()
    }

    /// Whether `GET /health` lists `voucher` under `field` (`stale_vouchers`, ...): as the
    /// admin, whom its detail is for.
    pub async fn health_lists(&self, field: &str, voucher: u64) -> bool {
        let Ok((_, health)) = self.call(Method::GET, "/health", ADMIN_TOKEN, None).await else {
            return false;
        };
        health[field].as_array().is_some_and(|ids| {
            ids.iter()
                .any(|id| *id == json!(voucher) || *id == json!(voucher.to_string()))
        })
    }
}

/// Where a buyer's presses ended: her last status and error code, and an order id if
/// she was told one.
#[derive(Debug, Clone)]
pub struct Final {
    pub status: u16,
    pub error: String,
    pub order_id: Option<u64>,
    pub presses: usize,
    /// The statuses of the presses the component answered 5xx, and when.
    pub failures: Vec<(u16, Instant)>,
    /// Presses the balancer answered 503 (every host busy past its queue's timeout) or
    /// that had no answer (a host killed under them).
    pub turned_away: usize,
}

/// One buyer pressing as the sale page does: again after `Retry-After` on a 429 or a
/// 503, again a second later after no answer or another 5xx, until a 201 or a 409.
pub async fn buyer(front: Storefront, voucher: u64, user: u64) -> Final {
    let path = format!("/vouchers/{voucher}/orders");
    let token = buyer_token(user);
    let (mut last, mut failures, mut turned_away) = ((0, "no answer".to_string()), Vec::new(), 0);
    for presses in 1..=MAX_PRESSES {
        match front.call(Method::POST, &path, &token, None).await {
            Ok((status, body))
                if status == StatusCode::CREATED || status == StatusCode::CONFLICT =>
            {
                return Final {
                    status: status.as_u16(),
                    error: body["error"].as_str().unwrap_or("").to_string(),
                    order_id: body["order_id"].as_str().and_then(|id| id.parse().ok()),
                    presses,
                    failures,
                    turned_away,
                };
            }
            Ok((status, body)) => {
                let busy = body["message"] == json!(BALANCER_BUSY);
                if status.is_server_error() && !busy {
                    failures.push((status.as_u16(), Instant::now()));
                }
                turned_away += usize::from(busy);
                last = (
                    status.as_u16(),
                    body["error"].as_str().unwrap_or("").to_string(),
                )
            }
            Err(error) => {
                turned_away += 1;
                last = (0, error.to_string())
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Final {
        status: last.0,
        error: last.1,
        order_id: None,
        presses: MAX_PRESSES,
        failures,
        turned_away,
    }
}

/// `buyers` buyers, their first presses spread over `spread`, at most `in_flight` at once.
pub fn sale(
    front: &Storefront,
    voucher: u64,
    first_user: u64,
    buyers: u64,
    spread: Duration,
    in_flight: usize,
) -> tokio::task::JoinHandle<Vec<(u64, Final)>> {
    let front = front.clone();
    tokio::spawn(async move {
        let gate = Arc::new(Semaphore::new(in_flight));
        let started = Instant::now();
        let tasks: Vec<_> = (0..buyers)
            .map(|i| {
                let (front, gate) = (front.clone(), gate.clone());
                let at = started + spread.mul_f64(i as f64 / buyers as f64);
                let user = first_user + i;
                tokio::spawn(async move {
                    tokio::time::sleep_until(at.into()).await;
                    let _permit = gate.acquire_owned().await.unwrap();
                    (user, buyer(front, voucher, user).await)
                })
            })
            .collect();
        let mut finals = Vec::new();
        for task in tasks {
            finals.push(task.await.unwrap());
        }
        println!(
            "every buyer answered {:.1} s after the first press",
            started.elapsed().as_secs_f64()
        );
        finals
    })
}

/// The sale's promises once it is quiet: every buyer answered, no oversell, one order a
/// buyer, every order she was told of in MySQL, every unit sold (more buyers than units),
/// and Redis agreeing with MySQL (a late press drains what a dead host left queued).
pub async fn assert_promises<Read, Reading>(
    front: &Storefront,
    voucher: u64,
    stock: u64,
    finals: &[(u64, Final)],
    read: Read,
) where
    Read: Fn(u64) -> Reading,
    Reading: Future<Output = SaleRecord>,
{
    let outcomes: BTreeMap<String, usize> =
        finals.iter().fold(BTreeMap::new(), |mut counts, (_, f)| {
            *counts
                .entry(format!("{} {}", f.status, f.error))
                .or_default() += 1;
            counts
        });
    let presses: usize = finals.iter().map(|(_, f)| f.presses).sum();
    let failures: BTreeMap<u16, usize> = finals.iter().flat_map(|(_, f)| &f.failures).fold(
        BTreeMap::new(),
        |mut counts, (status, _)| {
            *counts.entry(*status).or_default() += 1;
            counts
        },
    );
    // How long the sale answered 5xx: from the first such answer to the last.
    let times = finals
        .iter()
        .flat_map(|(_, f)| f.failures.iter().map(|(_, at)| *at));
    let unavailable = times
        .clone()
        .max()
        .zip(times.min())
        .map_or(0.0, |(last, first)| (last - first).as_secs_f64());
    let turned_away: usize = finals.iter().map(|(_, f)| f.turned_away).sum();
    let retried = finals.iter().filter(|(_, f)| f.presses > 1).count();
    println!(
        "voucher {voucher}: {} buyers ({retried} pressed again), {presses} presses (answered \
         5xx by a host, by status: \
         {failures:?}, over {unavailable:.2} s; {turned_away} turned away by the balancer or \
         unanswered), final answers {outcomes:?}",
        finals.len()
    );
    for (user, f) in finals {
        assert!(
            f.status == 201 || f.status == 409,
            "buyer {user} had no answer: {f:?}"
        );
    }
    let told: Vec<(u64, u64)> = finals
        .iter()
        .filter_map(|(user, f)| f.order_id.map(|order| (order, *user)))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    let record = loop {
        // A late buyer: her press takes the lease over whatever a dead drainer left.
        let late = front
            .call(
                Method::POST,
                &format!("/vouchers/{voucher}/orders"),
                &buyer_token(u64::MAX / 2),
                None,
            )
            .await;
        let record = read(voucher).await;
        if record.settled() {
            break record;
        }
        assert!(
            Instant::now() < deadline,
            "Redis never agreed with MySQL: {record:?} (late press {late:?})"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    record.assert_settled(&told);
    assert_eq!(
        record.live_orders(),
        stock,
        "every unit is sold to the buyers pressing for it"
    );
    let ordered: std::collections::HashSet<u64> = record.orders.values().copied().collect();
    for (user, f) in finals {
        if f.status == 201 || f.error == "already_ordered" {
            assert!(
                ordered.contains(user),
                "buyer {user} was told of an order: {f:?}"
            );
        }
    }
}

/// What a fairness run's winners (buyers' offsets from its `base`, of 100 units) won:
/// the scripts', and the people's of the spread's first half and of its second, checked
/// against the shares a fair order gives (15 %, 42.5 % and 42.5 % for 150 scripts and 850
/// people), each within about 4 standard deviations (3.6, 4.9 and 4.9 units); first come,
/// first served gave the scripts 86 and the last third of the people none. (A bound on
/// their difference instead, at 2.8 of its deviations, failed about one run in two
/// hundred.)
pub fn fair_shares(winners: &[u64], (scripts, people): (u64, u64)) -> (usize, usize, usize) {
    let won = winners.iter().filter(|i| **i < scripts).count();
    let half = scripts + people / 2;
    let early = winners
        .iter()
        .filter(|i| (scripts..half).contains(*i))
        .count();
    let late = winners.iter().filter(|i| **i >= half).count();
    assert!((3..=30).contains(&won), "scripts won {won}");
    assert!(
        (23..=62).contains(&early) && (23..=62).contains(&late),
        "early {early}, late {late}"
    );
    (won, early, late)
}
