//! Path (f): the storm. A voucher with thousands of units, twice as many distinct buyers
//! pressing "buy" once each, at most C requests in flight at a time (C connections), and
//! every buyer told `429` (`busy` or `throttled`) pressing again after `Retry-After`,
//! until every buyer has a final answer. MySQL's open connections are sampled meanwhile;
//! afterwards the sale's promises are checked against what MySQL and Redis hold.
//!
//! Why a Rust driver rather than wrk: each buyer is one token pressing until answered,
//! waiting out `Retry-After` between presses, and each 201's order id must be kept to
//! find its row afterwards.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use reqwest::StatusCode;
use serde_json::Value;
use tokio::sync::{Barrier, Semaphore};

use seckill_tests::app::buyer_token;
use seckill_tests::invariants;

use crate::counters::Servers;
use crate::results::{failures, Check, Latency, StormResult};

/// One buyer's presses.
struct Buyer {
    user: u64,
    /// Latency and outcome of every press.
    presses: Vec<(u64, String)>,
    last: (StatusCode, Value),
    answered_at: Duration,
}

/// The sale being stormed, and how.
pub struct Storm<'a> {
    pub base: &'a str,
    /// The component's settings, for the report.
    pub setting: &'a str,
    pub voucher_id: u64,
    pub stock: u64,
    pub buyers: Vec<u64>,
    pub connections: usize,
}

/// Every buyer presses once, all released together through at most `connections`
/// requests in flight, and presses again after `Retry-After` on a 429; then the sale's
/// promises are checked.
pub async fn run(storm: Storm<'_>, servers: &mut Servers) -> Result<StormResult> {
    let Storm {
        base,
        voucher_id,
        connections,
        ..
    } = storm;
    let buyers = &storm.buyers;
    let max_connections = servers.max_connections().await?;
    let before = servers.read().await?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .timeout(Duration::from_secs(60))
        .build()?;
    let url = format!("{base}/vouchers/{voucher_id}/orders");
    let in_flight = Arc::new(Semaphore::new(connections));
    let start_line = Arc::new(Barrier::new(buyers.len() + 1));
    let started = Arc::new(std::sync::OnceLock::<Instant>::new());
    let tasks: Vec<_> = buyers
        .iter()
        .map(|&user| {
            let (client, url, token) = (client.clone(), url.clone(), buyer_token(user));
            let (in_flight, start_line, started) =
                (in_flight.clone(), start_line.clone(), started.clone());
            tokio::spawn(async move {
                start_line.wait().await;
                let mut presses = Vec::new();
                loop {
                    let permit = in_flight.acquire().await?;
                    let sent = Instant::now();
                    let response = client.post(&url).bearer_auth(&token).send().await?;
                    let status = response.status();
                    let retry_after = response
                        .headers()
                        .get("retry-after")
                        .and_then(|value| value.to_str().ok()?.trim().parse().ok())
                        .unwrap_or(1);
                    let body: Value =
                        serde_json::from_slice(&response.bytes().await?).unwrap_or(Value::Null);
                    drop(permit);
                    presses.push((sent.elapsed().as_micros() as u64, outcome(status, &body)));
                    if status != StatusCode::TOO_MANY_REQUESTS {
                        let answered_at = started.get().map(Instant::elapsed).unwrap_or_default();
                        return anyhow::Ok(Buyer {
                            user,
                            presses,
                            last: (status, body),
                            answered_at,
                        });
                    }
                    tokio::time::sleep(Duration::from_secs(retry_after)).await;
                }
            })
        })
        .collect();
    let (threads_before, _) = servers.connections_now().await?;
    let done = AtomicBool::new(false);
    let sampling = async {
        let mut samples = Vec::new();
        while !done.load(Ordering::Relaxed) {
            let (threads, bench) = servers.connections_now().await?;
            let at = started.get().map(Instant::elapsed).unwrap_or_default();
            samples.push((at.as_secs_f64(), threads, bench));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        anyhow::Ok(samples)
    };
    let pressing = async {
        started.get_or_init(Instant::now);
        start_line.wait().await;
        let mut answered = Vec::new();
        for task in tasks {
            answered.push(task.await?);
        }
        done.store(true, Ordering::Relaxed);
        anyhow::Ok(answered)
    };
    let (answered, threads) = tokio::join!(pressing, sampling);
    let threads = threads?;
    let seconds = started.get().context("released")?.elapsed().as_secs_f64();
    let mut latencies = Vec::new();
    let mut outcomes = BTreeMap::<String, u64>::new();
    let mut finals = BTreeMap::<String, u64>::new();
    let mut acknowledged = Vec::new();
    let mut sold_at = Vec::new();
    for buyer in answered? {
        let buyer = buyer?;
        for (latency, outcome) in buyer.presses {
            latencies.push(latency);
            *outcomes.entry(outcome).or_default() += 1;
        }
        let (status, body) = &buyer.last;
        *finals.entry(outcome(*status, body)).or_default() += 1;
        if *status == StatusCode::CREATED {
            let order_id = body["order_id"].as_str().and_then(|id| id.parse().ok());
            acknowledged.push((order_id.unwrap_or(0), buyer.user));
            sold_at.push(buyer.answered_at.as_secs_f64());
        }
    }
    sold_at.sort_by(f64::total_cmp);
    // Requests still in flight on the server side when the last answer arrived finish
    // well within this.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let server = servers.read().await?.since(&before);
    let checks = check(
        voucher_id,
        storm.stock,
        buyers.len() as u64,
        &outcomes,
        &acknowledged,
    )
    .await;
    Ok(StormResult {
        setting: storm.setting.to_string(),
        buyers: buyers.len() as u64,
        stock: storm.stock,
        connections,
        attempts: latencies.len() as u64,
        seconds,
        sold_out_after: sold_at.last().copied().unwrap_or(0.0),
        latency: Latency::of(&mut latencies),
        outcomes,
        finals,
        peak_threads_connected: threads.iter().map(|s| s.1).fold(threads_before, u64::max),
        peak_bench_connections: threads.iter().map(|s| s.2).max().unwrap_or(0),
        threads_connected_before: threads_before,
        max_connections,
        sold_at,
        threads: threads.iter().map(|&(at, _, bench)| (at, bench)).collect(),
        server,
        checks,
    })
}

/// The status, or for a 409 or 429 its error code, as wrk/outcomes.lua names outcomes.
fn outcome(status: StatusCode, body: &Value) -> String {
    match body["error"].as_str() {
        Some(code) if status == StatusCode::CONFLICT || status == StatusCode::TOO_MANY_REQUESTS => {
            code.to_string()
        }
        _ => status.as_u16().to_string(),
    }
}

/// The promises of the sale, against what MySQL and Redis hold once every buyer has a
/// final answer: min(stock, buyers) orders, one per buyer, MySQL stock and orders adding
/// up to the initial stock, Redis agreeing with MySQL with nothing left pending, a row for
/// every 201 and a 201 for every row, and no 5xx.
async fn check(
    voucher_id: u64,
    stock: u64,
    buyers: u64,
    outcomes: &BTreeMap<String, u64>,
    acknowledged: &[(u64, u64)],
) -> Vec<Check> {
    let record = invariants::read(voucher_id).await;
    let orders = record.orders.len() as u64;
    let with_order: HashSet<u64> = record.orders.values().copied().collect();
    let missing = acknowledged
        .iter()
        .filter(|(order_id, user)| record.orders.get(order_id) != Some(user))
        .count();
    let check = |what: &str, expected: String, found: String| Check {
        ok: expected == found,
        what: what.to_string(),
        expected,
        found,
    };
    vec![
        check(
            "orders in MySQL = min(stock, buyers)",
            stock.min(buyers).to_string(),
            orders.to_string(),
        ),
        check(
            "buyers with an order (one each)",
            orders.to_string(),
            with_order.len().to_string(),
        ),
        check(
            "MySQL stock + orders = initial stock",
            record.initial_stock.to_string(),
            (record.mysql_stock + orders).to_string(),
        ),
        check(
            "Redis stock",
            format!("{} (= MySQL)", record.mysql_stock),
            match record.redis_stock {
                Some(stock) if stock == record.mysql_stock as i64 => format!("{stock} (= MySQL)"),
                other => format!("{other:?}"),
            },
        ),
        check(
            "reservations left pending in Redis",
            "0".into(),
            record.redis_pending.to_string(),
        ),
        check(
            "201 answers",
            orders.to_string(),
            acknowledged.len().to_string(),
        ),
        check(
            "201 answers without their row",
            "0".into(),
            missing.to_string(),
        ),
        check("5xx answers", "0".into(), failures(outcomes).to_string()),
    ]
}
