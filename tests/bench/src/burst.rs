//! Path (d): the flash sale itself. U buyers, many more than the S units, all press "buy"
//! at the same instant, and every buyer presses twice; then the sale's promises are
//! checked against what MySQL and Redis hold.
//!
//! Why a Rust driver rather than wrk: every request is a buyer's own connection released
//! together (not a fixed pool of keep-alive connections), and each 201's order id must be
//! kept to find its row afterwards.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use reqwest::StatusCode;
use serde_json::Value;
use tokio::sync::Barrier;

use seckill_tests::invariants;

use crate::results::{failures, Check, Latency};
use crate::storefront::Storefront;

/// What the buyers saw.
pub struct Answers {
    pub requests: u64,
    pub seconds: f64,
    pub latency: Latency,
    pub outcomes: BTreeMap<String, u64>,
    /// (order id, buyer) of every 201.
    pub acknowledged: Vec<(u64, u64)>,
}

/// Every buyer in `buyers` sends two purchase attempts, all released at once, each on a
/// connection of its own (a client's pool has no idle connection to lend when every
/// request starts together).
pub async fn run(base: &str, voucher_id: u64, buyers: &[u64]) -> Result<Answers> {
    let attempts: Vec<u64> = buyers.iter().chain(buyers.iter().rev()).copied().collect();
    let start_line = Arc::new(Barrier::new(attempts.len() + 1));
    let storefront = Arc::new(Storefront::new(base)?);
    let tasks: Vec<_> = attempts
        .into_iter()
        .map(|user| {
            let (storefront, start_line) = (storefront.clone(), start_line.clone());
            tokio::spawn(async move {
                start_line.wait().await;
                let sent = Instant::now();
                let (status, body) = storefront.buy(voucher_id, user).await?;
                anyhow::Ok((user, status, body, sent.elapsed().as_micros() as u64))
            })
        })
        .collect();
    start_line.wait().await;
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut outcomes = BTreeMap::<String, u64>::new();
    let mut acknowledged = Vec::new();
    for task in tasks {
        let (user, status, body, latency) = task.await??;
        latencies.push(latency);
        *outcomes.entry(outcome(status, &body)).or_default() += 1;
        if status == StatusCode::CREATED {
            let order_id = body["order_id"].as_str().and_then(|id| id.parse().ok());
            acknowledged.push((order_id.unwrap_or(0), user));
        }
    }
    Ok(Answers {
        requests: latencies.len() as u64,
        seconds: started.elapsed().as_secs_f64(),
        latency: Latency::of(&mut latencies),
        outcomes,
        acknowledged,
    })
}

/// The status, or for a 409 its error code, as wrk/outcomes.lua names outcomes.
fn outcome(status: StatusCode, body: &Value) -> String {
    match body["error"].as_str() {
        Some(code) if status == StatusCode::CONFLICT => code.to_string(),
        _ => status.as_u16().to_string(),
    }
}

/// The promises of the sale, against what MySQL and Redis hold now that every answer is
/// in: exactly `stock` orders, one per buyer, MySQL stock 0, Redis agreeing with MySQL
/// with nothing left pending, a row for every 201 and a 201 for every row, and no 5xx.
pub async fn check(voucher_id: u64, stock: u64, answers: &Answers) -> Vec<Check> {
    let record = invariants::read(voucher_id).await;
    let orders = record.orders.len() as u64;
    let buyers: HashSet<u64> = record.orders.values().copied().collect();
    let missing = answers
        .acknowledged
        .iter()
        .filter(|(order_id, user)| record.orders.get(order_id) != Some(user))
        .count();
    let server_errors = failures(&answers.outcomes);
    let check = |what: &str, expected: String, found: String| Check {
        ok: expected == found,
        what: what.to_string(),
        expected,
        found,
    };
    vec![
        check("orders in MySQL", stock.to_string(), orders.to_string()),
        check(
            "buyers with an order",
            orders.to_string(),
            buyers.len().to_string(),
        ),
        check(
            "MySQL stock left",
            "0".into(),
            record.mysql_stock.to_string(),
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
            answers.acknowledged.len().to_string(),
        ),
        check(
            "201 answers without their row",
            "0".into(),
            missing.to_string(),
        ),
        check("5xx answers", "0".into(), server_errors.to_string()),
    ]
}
