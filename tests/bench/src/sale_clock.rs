//! Path (f): the sale clock. A whole sale as its buyers live it: a voucher that opens at
//! a set time a few seconds ahead, each buyer's first press at a random moment within
//! the shape's spread after the opening, through at most C requests in flight (C
//! connections, opened before the opening as the sale page's polling would have), and
//! every buyer doing what the sale page does: on `429` wait `Retry-After` seconds and
//! press again; stop at `201` or a `409`; after a `5xx` press again a second later, a few
//! times at most. MySQL's open connections are sampled through the sale; afterwards the
//! sale's promises are checked against what MySQL and Redis hold.
//!
//! A shape with a payment window is also run past its deadlines: each winner pays at once
//! unless she is drawn among those who never pay; their orders expire, the first press
//! after a deadline gives the units back, and buyers arriving later buy them again. Once
//! every buyer has her answer and the last deadline has passed, the driver expires what
//! is left, as a scheduler would, before checking.
//!
//! Why a Rust driver rather than wrk: each buyer is one token pressing until answered,
//! waiting out `Retry-After` between presses, first pressing at her own moment, and each
//! 201's order id must be kept to find its row.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use reqwest::StatusCode;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::time::sleep_until;

use seckill_tests::drivers::invariants::{self, SaleRecord};

use crate::counters::Servers;
use crate::line::{Member, Waiting};
use crate::results::{Check, Latency, Line, Resale, SaleResult, BIN_S, GAVE_UP, TRANSPORT};
use crate::storefront::Storefront;

/// A sale's shape: how many units, how many buyers, how they arrive.
#[derive(Debug, Clone)]
pub struct Shape {
    pub name: &'static str,
    pub stock: u64,
    pub buyers: u64,
    pub connections: usize,
    /// Each buyer's first press falls within this long after the opening.
    pub spread: Duration,
    /// The voucher's payment window; `None` for the API's default (900 s), which no sale
    /// here outlasts: nobody pays and every order stays live.
    pub pay_within_s: Option<u64>,
    /// With a payment window, the share of buyers who never pay, should they win.
    pub never_pay: f64,
    /// The most units a buyer may hold: each asks for [`Shape::units`].
    pub per_buyer: u64,
    /// A buyer told `sold_out` joins the sale's line and waits in it ([`crate::line`]).
    pub line: bool,
}

impl Shape {
    /// The units buyer `user` asks for: 1 to `per_buyer`, by user (one, all, for a shape
    /// of one unit a buyer, whose presses send no body, as before quantities).
    pub fn units(&self, user: u64) -> u64 {
        1 + user % self.per_buyer
    }
}

/// The most presses a buyer makes: one who still has no answer after this many (half a
/// minute of `busy` answers) gives up.
const MAX_PRESSES: usize = 30;
/// How many times a buyer presses again after a `5xx`.
const MAX_FAILURES: usize = 3;
/// How often MySQL's connections are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);

/// One answer a buyer received.
struct Press {
    /// Seconds after the opening the answer arrived.
    at: f64,
    latency_us: u64,
    outcome: String,
}

/// One buyer's presses and where they ended.
struct Buyer {
    user: u64,
    presses: Vec<Press>,
    /// The final outcome (`GAVE_UP` when none came), with the order id of a 201 or an
    /// `already_ordered`.
    last: String,
    order_id: Option<u64>,
}

/// The sale to run: a voucher opening at `opening`, its buyers' tokens (minted
/// beforehand) and users.
pub struct Sale<'a> {
    /// The component's storefront, for the sale's requests and the payments.
    pub storefront: &'a Storefront,
    pub shape: &'a Shape,
    pub voucher_id: u64,
    pub opening: Instant,
    pub buyers: Vec<(u64, String)>,
    /// Spin's Redis floor at `shape.connections`, measured just before.
    pub redis_floor: f64,
    pub seed: u64,
}

pub async fn run(sale: Sale<'_>, servers: &mut Servers) -> Result<SaleResult> {
    let Sale {
        storefront,
        shape,
        voucher_id,
        opening,
        ..
    } = sale;
    let base = &storefront.base;
    let connections = shape.connections;
    let max_connections = servers.max_connections().await?;
    let before = servers.read().await?;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .timeout(Duration::from_secs(60))
        .build()?;
    warm(&client, base, voucher_id, connections).await?;
    let url = Arc::new(format!("{base}/vouchers/{voucher_id}/orders"));
    let in_flight = Arc::new(Semaphore::new(connections));
    let mut random = SplitMix(sale.seed);
    let spread = shape.spread.as_secs_f64();
    let users: Vec<u64> = sale.buyers.iter().map(|(user, _)| *user).collect();
    let line = match (shape.line, shape.pay_within_s) {
        (true, Some(window)) => Some(Arc::new(Waiting::new(
            client.clone(),
            (base, voucher_id),
            in_flight.clone(),
            opening,
            (window, shape.spread),
        ))),
        _ => None,
    };
    let tokens: HashMap<u64, String> = match line {
        Some(_) => sale.buyers.iter().cloned().collect(),
        None => HashMap::new(),
    };
    let tasks: Vec<_> = sale
        .buyers
        .into_iter()
        .map(|(user, token)| {
            let first = opening + Duration::from_secs_f64(random.unit() * spread);
            // Drawn only for a shape with a payment window, so that the other shapes'
            // first presses stay those of earlier runs.
            let pays = shape.pay_within_s.is_some() && random.unit() >= shape.never_pay;
            let (client, url, in_flight) = (client.clone(), url.clone(), in_flight.clone());
            let storefront = storefront.clone();
            let units = shape.units(user);
            let line = line.clone();
            tokio::spawn(async move {
                sleep_until(first.into()).await;
                let buyer =
                    buyer(&client, &url, (user, units), &token, &in_flight, opening).await?;
                // In a sale with a line, a buyer told sold out waits in it, and pays for
                // the order it hands her as a winner pays for hers.
                let member = match (&line, buyer.last.as_str()) {
                    (Some(line), "sold_out") => Some(line.wait(user, &token).await?),
                    _ => None,
                };
                let won = match (buyer.last.as_str(), buyer.order_id, &member) {
                    ("201", Some(order_id), _) => {
                        Some((order_id, buyer.presses.last().map_or(0.0, |p| p.at)))
                    }
                    (_, _, Some(member)) => member.ordered.filter(|_| !member.expired_unheard),
                    _ => None,
                };
                let paid = match (pays, won) {
                    (true, Some((order_id, _))) => {
                        let permit = match &line {
                            Some(line) => Some(line.payments.acquire().await?),
                            None => None,
                        };
                        let paid = pay(&storefront, order_id).await;
                        drop(permit);
                        Some(paid)
                    }
                    (false, Some((_, at))) => {
                        if let Some(line) = &line {
                            line.unpaid(at);
                        }
                        None
                    }
                    _ => None,
                };
                anyhow::Ok((buyer, paid, member))
            })
        })
        .collect();

    let done = AtomicBool::new(false);
    let (mut longest, mut handshake) = (0, 0);
    // With a line, Redis's count of units given back too: when each came back; and the
    // line itself, once a second until the first came back.
    let mut returns = Vec::new();
    let (mut line_before, mut line_read_at) = (Vec::new(), f64::NEG_INFINITY);
    let sampling = async {
        let mut samples = Vec::new();
        while !done.load(Ordering::Relaxed) {
            let now = servers.connections_now().await?;
            let at = seconds_since(opening, Instant::now());
            samples.push((at, now.server, now.component));
            longest = longest.max(now.running_ms);
            handshake = handshake.max(now.handshake_ms);
            if line.is_some() {
                let returned = servers.units_returned(voucher_id).await?;
                returns.push((seconds_since(opening, Instant::now()), returned));
                if returned == 0 && at - line_read_at >= 1.0 {
                    line_before = servers.line_order(voucher_id).await?;
                    line_read_at = at;
                }
            }
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
        anyhow::Ok(samples)
    };
    let pressing = async {
        let mut answered = Vec::new();
        for task in tasks {
            answered.push(task.await?);
        }
        done.store(true, Ordering::Relaxed);
        anyhow::Ok(answered)
    };
    let (answered, samples) = tokio::join!(pressing, sampling);
    let (answered, samples) = (answered?, samples?);
    // Requests still in flight on the server side when the last answer arrived finish
    // well within this.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let server = servers.read().await?.since(&before);

    let mut latencies = Vec::new();
    let mut outcomes = BTreeMap::<String, u64>::new();
    let mut finals = BTreeMap::<String, u64>::new();
    let mut timeline = BTreeMap::<String, Vec<u64>>::new();
    let (mut last_unit_s, mut last_answer_s) = (0.0f64, 0.0f64);
    let mut acknowledged = Vec::new();
    let mut told_owned = Vec::new();
    let mut payments = BTreeMap::<String, u64>::new();
    let mut members = Vec::new();
    for buyer in answered {
        let (buyer, paid, member) = buyer?;
        if let Some(outcome) = paid {
            *payments.entry(outcome).or_default() += 1;
        }
        members.extend(member);
        for press in &buyer.presses {
            latencies.push(press.latency_us);
            *outcomes.entry(press.outcome.clone()).or_default() += 1;
            let bin = (press.at.max(0.0) / BIN_S) as usize;
            let bins = timeline.entry(press.outcome.clone()).or_default();
            if bins.len() <= bin {
                bins.resize(bin + 1, 0);
            }
            bins[bin] += 1;
        }
        *finals.entry(buyer.last.clone()).or_default() += 1;
        let at = buyer.presses.last().map_or(0.0, |press| press.at);
        if buyer.last != GAVE_UP {
            last_answer_s = last_answer_s.max(at);
        }
        match (buyer.last.as_str(), buyer.order_id) {
            ("201", order_id) => {
                last_unit_s = last_unit_s.max(at);
                acknowledged.push((order_id.unwrap_or(0), buyer.user));
                told_owned.push((order_id.unwrap_or(0), buyer.user));
            }
            ("already_ordered", Some(order_id)) => told_owned.push((order_id, buyer.user)),
            _ => {}
        }
    }
    let peak_threads_connected = samples.iter().map(|s| s.1).max().unwrap_or(0);
    let threads_connected_before = samples
        .iter()
        .take_while(|s| s.0 < 0.0)
        .last()
        .or(samples.first())
        .map_or(0, |s| s.1);
    let mut result = SaleResult {
        shape: shape.name.to_string(),
        stock: shape.stock,
        buyers: shape.buyers,
        units_asked: users.iter().map(|user| shape.units(*user)).sum(),
        connections,
        spread_s: spread,
        redis_floor: sale.redis_floor,
        presses: latencies.len() as u64,
        last_unit_s,
        last_answer_s,
        latency: Latency::of(&mut latencies),
        outcomes,
        finals,
        timeline,
        peak_component_connections: samples.iter().map(|s| s.2).max().unwrap_or(0),
        peak_threads_connected,
        threads_connected_before,
        longest_statement_ms: longest,
        longest_handshake_ms: handshake,
        max_connections,
        samples,
        server,
        resale: None,
        line: None,
        checks: Vec::new(),
    };
    if let Some(line) = &line {
        come_back(line, &mut members, &tokens, servers, voucher_id).await?;
    }
    // The last order handed: a 201's, or the line's.
    let last_order_s = members
        .iter()
        .filter_map(|m| m.ordered.map(|(_, at)| at))
        .fold(last_unit_s, f64::max);
    let returned_at_end = match shape.pay_within_s {
        Some(window) => {
            // An order is due `window` after its commit, to the second, and it was
            // committed before its 201.
            let last_due = opening
                + Duration::from_secs_f64(last_order_s.max(0.0))
                + Duration::from_secs(window + 1);
            sleep_until(last_due.into()).await;
            Some((window, storefront.expire(voucher_id).await?))
        }
        None => None,
    };
    let record = invariants::read(voucher_id).await;
    if let Some((pay_within_s, returned_at_end)) = returned_at_end {
        let with_status = |status| record.statuses.values().filter(|s| **s == status).count();
        result.resale = Some(Resale {
            pay_within_s,
            never_pay: shape.never_pay,
            orders_created: record.orders.len() as u64,
            paid: with_status(PAID) as u64,
            expired: with_status(EXPIRED) as u64,
            payments,
            returned_at_end,
            units_returned: servers.units_returned(voucher_id).await?,
        });
    }
    if line.is_some() {
        // Orders the line handed were acknowledged as a 201's are: `ordered` with the id.
        let bought: HashSet<u64> = acknowledged.iter().map(|(order_id, _)| *order_id).collect();
        let mut bought = bought;
        for member in &members {
            if let Some((order_id, _)) = member.ordered {
                acknowledged.push((order_id, member.user));
                told_owned.push((order_id, member.user));
                if member.bought {
                    bought.insert(order_id);
                }
            }
        }
        result.line = Some(crate::line::figures(
            &members,
            &record,
            &bought,
            &returns,
            &line_before,
        ));
    }
    result.checks = check(&record, &result, &acknowledged, &told_owned);
    Ok(result)
}

/// Looks once as each member the line handed an order after she stopped waiting (Redis's
/// `drawn`), so that no purchase it queued is left uncommitted; again while such looks
/// hand more (a look sweeps expiries too).
async fn come_back(
    line: &Waiting,
    members: &mut [Member],
    tokens: &HashMap<u64, String>,
    servers: &mut Servers,
    voucher_id: u64,
) -> Result<()> {
    for _ in 0..5 {
        let drawn = servers.drawn(voucher_id).await?;
        let mut looked = false;
        for member in members.iter_mut() {
            let heard = member.ordered.is_some();
            if let (false, true, Some(token)) = (
                heard,
                drawn.contains(&member.user),
                tokens.get(&member.user),
            ) {
                line.come_back(member, token).await?;
                looked = true;
            }
        }
        if !looked {
            break;
        }
    }
    Ok(())
}

/// Order statuses in MySQL (`tb_voucher_order.status`).
const UNPAID: u8 = 1;
const PAID: u8 = 2;
const EXPIRED: u8 = 7;

/// Opens `connections` keep-alive connections before the opening, as buyers' sale pages
/// polling the voucher would have: each a `GET /vouchers/{id}`, all at once.
async fn warm(
    client: &reqwest::Client,
    base: &str,
    voucher_id: u64,
    connections: usize,
) -> Result<()> {
    let url = format!("{base}/vouchers/{voucher_id}");
    let polls: Vec<_> = (0..connections)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move { client.get(&url).send().await?.bytes().await })
        })
        .collect();
    for poll in polls {
        poll.await??;
    }
    Ok(())
}

/// One buyer asking for `units`, from her first press to her final answer: told fewer
/// are left, she asks for those.
async fn buyer(
    client: &reqwest::Client,
    url: &str,
    (user, mut units): (u64, u64),
    token: &str,
    in_flight: &Semaphore,
    opening: Instant,
) -> Result<Buyer> {
    let mut presses = Vec::new();
    let mut failures = 0;
    while presses.len() < MAX_PRESSES {
        let permit = in_flight.acquire().await?;
        let sent = Instant::now();
        let answer = press(client, url, token, units).await;
        drop(permit);
        let answered = Instant::now();
        let (outcome, retry_after, order_id) = match answer {
            Ok((status, retry_after, body)) => {
                let order_id = body["order_id"].as_str().and_then(|id| id.parse().ok());
                if let Some(left) = body["left"].as_u64() {
                    units = left;
                }
                (outcome(status, &body), retry_after, order_id)
            }
            Err(_) => (TRANSPORT.to_string(), None, None),
        };
        presses.push(Press {
            at: seconds_since(opening, answered),
            latency_us: answered.duration_since(sent).as_micros() as u64,
            outcome: outcome.clone(),
        });
        let wait = match outcome.as_str() {
            // Too early (the clocks disagree): the sale page counts down to the opening.
            "not_started" => Duration::from_millis(100),
            // Fewer units left than she asked for: she asks for those at once.
            "not_enough_left" => Duration::ZERO,
            "busy" | "throttled" => Duration::from_secs(retry_after.unwrap_or(1)),
            failed if failed.starts_with('5') || failed == TRANSPORT => {
                failures += 1;
                if failures > MAX_FAILURES {
                    return Ok(Buyer {
                        user,
                        presses,
                        last: outcome,
                        order_id: None,
                    });
                }
                Duration::from_secs(1)
            }
            // 201, every other 409, and anything else the page would show as final.
            _ => {
                return Ok(Buyer {
                    user,
                    presses,
                    last: outcome,
                    order_id,
                })
            }
        };
        tokio::time::sleep(wait).await;
    }
    Ok(Buyer {
        user,
        presses,
        last: GAVE_UP.to_string(),
        order_id: None,
    })
}

/// A winner paying for her order at once: the answer's outcome.
async fn pay(storefront: &Storefront, order_id: u64) -> String {
    match storefront.pay(order_id).await {
        Ok((status, body)) => outcome(status, &body),
        Err(_) => TRANSPORT.to_string(),
    }
}

/// One press for `units` units (an empty body for one): the status, `Retry-After` in
/// seconds, and the JSON body.
async fn press(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    units: u64,
) -> reqwest::Result<(StatusCode, Option<u64>, Value)> {
    let mut request = client.post(url).bearer_auth(token);
    if units > 1 {
        request = request.json(&serde_json::json!({ "quantity": units }));
    }
    let response = request.send().await?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok()?.trim().parse().ok());
    let body = serde_json::from_slice(&response.bytes().await?).unwrap_or(Value::Null);
    Ok((status, retry_after, body))
}

/// The status, or for a 409 or 429 its error code, as wrk/outcomes.lua names outcomes.
pub(crate) fn outcome(status: StatusCode, body: &Value) -> String {
    match body["error"].as_str() {
        Some(code) if status == StatusCode::CONFLICT || status == StatusCode::TOO_MANY_REQUESTS => {
            code.to_string()
        }
        _ => status.as_u16().to_string(),
    }
}

pub(crate) fn seconds_since(opening: Instant, at: Instant) -> f64 {
    if at >= opening {
        at.duration_since(opening).as_secs_f64()
    } else {
        -opening.duration_since(at).as_secs_f64()
    }
}

/// The promises of the sale, against what MySQL and Redis hold once every buyer has her
/// final answer (and, for a sale run past its deadlines, once the last expire is done).
/// `acknowledged`: (order id, user) of each 201; `told_owned`: those and each
/// `already_ordered` final answer's.
fn check(
    record: &SaleRecord,
    sale: &SaleResult,
    acknowledged: &[(u64, u64)],
    told_owned: &[(u64, u64)],
) -> Vec<Check> {
    let orders = record.orders.len() as u64;
    let live = record.live_units();
    let with_order: HashSet<u64> = record.orders.values().copied().collect();
    let missing = acknowledged
        .iter()
        .filter(|(order_id, user)| record.orders.get(order_id) != Some(user))
        .count();
    let sound = std::panic::catch_unwind(|| {
        record.assert_sound(acknowledged);
        record.assert_redis_agrees();
    })
    .err()
    .map(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "failed".into())
    });
    // A sale run past its deadlines ends with the last expiries' units back in stock.
    let mut checks = match &sale.resale {
        Some(resale) => resale_checks(record, sale.stock, resale),
        None => vec![expect(
            "units sold = min(stock, units the buyers ask for): every unit sold",
            sale.stock.min(sale.units_asked),
            live,
        )],
    };
    checks.extend([
        Check {
            what: "no oversell: units of live orders ≤ initial stock".into(),
            expected: format!("≤ {}", record.initial_stock),
            found: live.to_string(),
            ok: live <= record.initial_stock,
        },
        expect("one order per buyer", orders, with_order.len()),
        expect(
            "MySQL stock + units of live orders = initial stock",
            record.initial_stock,
            record.mysql_stock + live,
        ),
        expect("201 answers without their row in MySQL", 0, missing),
        expect(
            "buyers told they hold an order (201, or 409 already_ordered with its id)",
            orders,
            told_owned.len(),
        ),
        expect("Redis: purchases left queued", 0, record.redis_queued),
        Check {
            what: "Redis stock".into(),
            expected: format!("{} (= MySQL)", record.mysql_stock),
            found: match record.redis_stock {
                Some(stock) if stock == record.mysql_stock as i64 => format!("{stock} (= MySQL)"),
                other => format!("{other:?}"),
            },
            ok: record.redis_stock == Some(record.mysql_stock as i64),
        },
        expect("5xx answers", 0, sale.failures()),
        expect(
            "buyers with a final answer (201 or 409)",
            sale.buyers,
            sale.answered(),
        ),
        expect(
            "seckill_tests::drivers::invariants (assert_sound, assert_redis_agrees)",
            "hold",
            sound.unwrap_or_else(|| "hold".into()),
        ),
    ]);
    if let Some(line) = &sale.line {
        checks.extend(line_checks(line));
    }
    checks
}

/// What a sale with a line must show: every unit given back went to the line, in its
/// order, and each order it handed was heard.
fn line_checks(line: &Line) -> Vec<Check> {
    vec![
        expect(
            "orders after the line's first hand-out (by id) that it did not hand",
            0,
            line.outsiders,
        ),
        expect(
            "orders the line handed = members told of it (`ordered`, or `order_expired`)",
            line.line_orders,
            line.ordered,
        ),
        expect(
            format!(
                "line orders handed out of the line's order (pairs, of {} placed)",
                line.placed
            )
            .as_str(),
            0,
            line.inversions,
        ),
    ]
}

/// What a sale run past its payment deadlines must show: units sold again, every payment
/// an order paid, every other order expired, and each expiry a unit given back.
fn resale_checks(record: &SaleRecord, stock: u64, resale: &Resale) -> Vec<Check> {
    let resold = resale.resold(stock);
    let paid_200 = resale.payments.get("200").copied().unwrap_or(0);
    let unpaid = record.statuses.values().filter(|s| **s == UNPAID).count();
    vec![
        Check {
            what: "units resold: orders created − stock > 0".into(),
            expected: "> 0".into(),
            found: format!("{resold} ({} orders, {stock} units)", resale.orders_created),
            ok: resold > 0,
        },
        expect(
            "winners who paid heard 200",
            resale.payments.values().sum::<u64>(),
            paid_200,
        ),
        expect(
            "paid orders in MySQL = payments answered 200",
            paid_200,
            resale.paid,
        ),
        expect(
            "expired orders in MySQL = units given back (Redis `units:returned`)",
            resale.units_returned,
            resale.expired,
        ),
        expect("orders still unpaid after the last expire", 0, unpaid),
    ]
}

/// A check that a figure found is the one expected.
fn expect(what: &str, expected: impl ToString, found: impl ToString) -> Check {
    let (expected, found) = (expected.to_string(), found.to_string());
    Check {
        ok: expected == found,
        what: what.to_string(),
        expected,
        found,
    }
}

/// A small, seeded generator for the first presses' moments and for who never pays
/// (SplitMix64), so that a shape's buyers are the same from run to run.
struct SplitMix(u64);

impl SplitMix {
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_presses_spread_evenly() {
        let mut random = SplitMix(7);
        let draws: Vec<f64> = (0..10_000).map(|_| random.unit()).collect();
        assert!(draws.iter().all(|x| (0.0..1.0).contains(x)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
        let first_tenth = draws.iter().filter(|x| **x < 0.1).count();
        assert!((800..1200).contains(&first_tenth), "{first_tenth}");
    }

    #[test]
    fn outcomes_name_409s_and_429s_by_code() {
        let body = serde_json::json!({ "error": "sold_out" });
        assert_eq!(outcome(StatusCode::CONFLICT, &body), "sold_out");
        assert_eq!(outcome(StatusCode::SERVICE_UNAVAILABLE, &body), "503");
        assert_eq!(outcome(StatusCode::CREATED, &Value::Null), "201");
    }
}
