//! The line shape's waiting buyers (docs/design.md, "The line"): a buyer told `sold_out`
//! joins the sale's line (`POST /vouchers/{id}/line`) and looks at her standing (`GET`)
//! a second after each answer, until the line hands her an order or the units stop
//! coming back; then what the line did, against MySQL and Redis.
//!
//! A unit comes back when an order nobody pays expires, its payment window after its
//! commit: the driver knows each order it will not pay, and its members keep waiting
//! until [`GRACE`] past the last such deadline it heard of.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use reqwest::Method;
use serde_json::Value;
use tokio::sync::Semaphore;

use seckill_tests::drivers::invariants::SaleRecord;

use crate::results::{Latency, Line, TRANSPORT};

/// A waiting buyer's next look goes this long after the last one's answer at least, or
/// after its `Retry-After` when that says longer, as the sale page polls (every second,
/// 9,000 waiting buyers took the two cores from the payments, which then came past their
/// deadlines).
pub const POLL_EVERY: Duration = Duration::from_secs(3);
/// How long past the last deadline of an order nobody pays members keep waiting: its unit
/// is handed at the first request after the deadline, and she hears it at her next look.
const GRACE: Duration = Duration::from_secs(6);
/// Payments in flight at once: the payment system's own connections. The line hands
/// orders in bursts (a sweep's units at once), and each payment opens a MySQL connection.
const PAYMENTS_IN_FLIGHT: usize = 48;
/// A member stops after this many failed requests (5xx or none), as a buyer does.
const MAX_FAILURES: usize = 3;
/// The most joins a buyer sends while they answer `busy` or `throttled`.
const MAX_JOINS: usize = 30;

/// What the waiting buyers share: the line's address, the connections, and until when
/// units may still come back.
pub struct Waiting {
    client: reqwest::Client,
    url: String,
    in_flight: Arc<Semaphore>,
    opening: Instant,
    window_s: f64,
    /// Milliseconds after the opening: pushed on by each order nobody will pay.
    until_ms: AtomicU64,
    /// The payment system's connections.
    pub payments: Semaphore,
}

/// One member's requests to the line and what they answered.
#[derive(Debug, Default)]
pub struct Member {
    pub user: u64,
    /// When her join was answered with a place (seconds after the opening), and the place.
    pub joined: Option<(f64, u64)>,
    /// Outcomes of her joins and of her looks.
    pub joins: Vec<String>,
    pub looks: Vec<String>,
    /// Each place she was told: (seconds after the opening, `position`, `line_length`).
    pub standings: Vec<(f64, u64, u64)>,
    /// The order the line handed her and when she heard it; `bought` when her join was
    /// itself a purchase (units left and nobody waiting).
    pub ordered: Option<(u64, f64)>,
    pub bought: bool,
    /// Her first look since found the order already expired (`409 order_expired` with its
    /// id): it was committed by another request's batch and its window ran out first.
    pub expired_unheard: bool,
    /// She heard it only from the look the driver sent once she had stopped waiting.
    pub came_back: bool,
    pub last_at: f64,
}

/// An answer of the line's routes: its outcome, `Retry-After`, and its body.
struct Answer {
    outcome: String,
    retry_after: Option<u64>,
    body: Value,
}

impl Waiting {
    /// The line of voucher `voucher_id` at `base`: its first members join after presses
    /// that end within `spread` of the opening, and an order is due `window_s` after its
    /// commit.
    pub fn new(
        client: reqwest::Client,
        (base, voucher_id): (&str, u64),
        in_flight: Arc<Semaphore>,
        opening: Instant,
        (window_s, spread): (u64, Duration),
    ) -> Waiting {
        let waiting = Waiting {
            client,
            url: format!("{base}/vouchers/{voucher_id}/line"),
            in_flight,
            opening,
            window_s: window_s as f64,
            until_ms: AtomicU64::new(0),
            payments: Semaphore::new(PAYMENTS_IN_FLIGHT),
        };
        waiting.unpaid(spread.as_secs_f64());
        waiting
    }

    /// An order nobody will pay, heard `at` seconds after the opening: its unit comes back
    /// by its deadline (whole seconds after its commit), and the line waits for it.
    pub fn unpaid(&self, at: f64) {
        let until = at + self.window_s + 1.0 + GRACE.as_secs_f64();
        self.until_ms
            .fetch_max((until * 1000.0) as u64, Ordering::Relaxed);
    }

    fn now(&self) -> f64 {
        crate::sale_clock::seconds_since(self.opening, Instant::now())
    }

    fn still_waiting(&self) -> bool {
        self.now() * 1000.0 < self.until_ms.load(Ordering::Relaxed) as f64
    }

    /// Buyer `user`, told `sold_out`: she joins, then looks every [`POLL_EVERY`] until
    /// the line hands her an order or units stop coming back.
    pub async fn wait(&self, user: u64, token: &str) -> Result<Member> {
        let mut member = Member {
            user,
            ..Member::default()
        };
        let mut failures = 0;
        while member.joins.len() < MAX_JOINS {
            let answer = self.ask(Method::POST, token).await?;
            member.joins.push(answer.outcome.clone());
            let wait = match self.heard(&mut member, &answer) {
                Heard::Waiting(_) => {
                    let at = member.last_at;
                    member.joined = member.standings.last().map(|s| (at, s.1));
                    break;
                }
                Heard::Ordered => {
                    member.bought = true;
                    return Ok(member);
                }
                Heard::Again(wait) => wait,
                Heard::Failed if failures < MAX_FAILURES => {
                    failures += 1;
                    Duration::from_secs(1)
                }
                Heard::Failed | Heard::Done => return Ok(member),
            };
            tokio::time::sleep(wait).await;
        }
        let mut wait = POLL_EVERY;
        while member.joined.is_some() && self.still_waiting() {
            tokio::time::sleep(wait).await;
            wait = match self.look(&mut member, token).await? {
                Heard::Waiting(retry) | Heard::Again(retry) => retry.max(POLL_EVERY),
                Heard::Failed if failures < MAX_FAILURES => {
                    failures += 1;
                    POLL_EVERY
                }
                Heard::Ordered | Heard::Failed | Heard::Done => break,
            };
        }
        Ok(member)
    }

    /// One look at her standing, for a member who had stopped waiting and whom the line
    /// handed an order since (Redis's `drawn`): it commits the order when still queued.
    pub async fn come_back(&self, member: &mut Member, token: &str) -> Result<()> {
        if let Heard::Ordered = self.look(member, token).await? {
            member.came_back = true;
        }
        Ok(())
    }

    async fn look(&self, member: &mut Member, token: &str) -> Result<Heard> {
        let answer = self.ask(Method::GET, token).await?;
        member.looks.push(answer.outcome.clone());
        Ok(self.heard(member, &answer))
    }

    /// Notes an answer in `member` and says what she does next.
    fn heard(&self, member: &mut Member, answer: &Answer) -> Heard {
        member.last_at = self.now();
        let body = &answer.body;
        match answer.outcome.as_str() {
            "waiting" => {
                let field = |name: &str| body[name].as_u64().unwrap_or(0);
                let standing = (member.last_at, field("position"), field("line_length"));
                member.standings.push(standing);
                Heard::Waiting(Duration::from_secs(answer.retry_after.unwrap_or(0)))
            }
            "ordered" => {
                let order_id = body["order_id"].as_str().and_then(|id| id.parse().ok());
                member.ordered = order_id.map(|id| (id, member.last_at));
                Heard::Ordered
            }
            "order_expired" | "order_cancelled" => {
                let order_id = body["order_id"].as_str().and_then(|id| id.parse().ok());
                member.ordered = order_id.map(|id| (id, member.last_at));
                member.expired_unheard = true;
                Heard::Ordered
            }
            "busy" | "throttled" => {
                Heard::Again(Duration::from_secs(answer.retry_after.unwrap_or(1)))
            }
            failed if failed.starts_with('5') || failed == TRANSPORT => Heard::Failed,
            _ => Heard::Done,
        }
    }

    /// One request to the line as the buyer whose token is `token`.
    async fn ask(&self, method: Method, token: &str) -> Result<Answer> {
        let permit = self.in_flight.acquire().await?;
        let sent = self
            .client
            .request(method, &self.url)
            .bearer_auth(token)
            .send()
            .await;
        let answer = match sent {
            Ok(response) => {
                let status = response.status();
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|value| value.to_str().ok()?.trim().parse().ok());
                let body = match response.bytes().await {
                    Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                    Err(_) => Value::Null,
                };
                let outcome = match body["status"].as_str() {
                    Some(standing) if status.is_success() => standing.to_string(),
                    _ => crate::sale_clock::outcome(status, &body),
                };
                Answer {
                    outcome,
                    retry_after,
                    body,
                }
            }
            Err(_) => Answer {
                outcome: TRANSPORT.to_string(),
                retry_after: None,
                body: Value::Null,
            },
        };
        drop(permit);
        Ok(answer)
    }
}

/// What an answer leaves a member to do.
enum Heard {
    /// In line; look again after this (`Retry-After`).
    Waiting(Duration),
    Ordered,
    Again(Duration),
    Failed,
    Done,
}

/// What the line did, from its members' answers, the sale's orders in MySQL, and Redis's
/// count of units given back sampled through the sale (`returns`: seconds after the
/// opening, units given back so far). `bought`: the orders acknowledged by a `201` to a
/// press or to a join.
pub fn figures(
    members: &[Member],
    record: &SaleRecord,
    bought: &HashSet<u64>,
    returns: &[(f64, u64)],
    line_before: &[u64],
) -> Line {
    let joined: HashMap<u64, &Member> = members
        .iter()
        .filter(|m| m.joined.is_some() || m.bought)
        .map(|m| (m.user, m))
        .collect();
    let mut line_orders: Vec<(u64, u64)> = record
        .orders
        .iter()
        .filter(|(order_id, _)| !bought.contains(order_id))
        .map(|(order_id, user)| (*order_id, *user))
        .collect();
    line_orders.sort_unstable();
    // Before the line's first hand-out, units given back are anyone's (nobody waits yet);
    // from it on, every order not acknowledged by a 201 must be the line's.
    let first_handed = line_orders
        .iter()
        .find(|(_, user)| joined.contains_key(user))
        .map_or(u64::MAX, |(order_id, _)| *order_id);
    let outsiders = line_orders
        .iter()
        .filter(|(order_id, user)| *order_id > first_handed && !joined.contains_key(user))
        .count() as u64;
    let bought_after = bought.iter().filter(|id| **id > first_handed).count() as u64;
    let handed: Vec<&Member> = line_orders
        .iter()
        .filter_map(|(_, user)| joined.get(user).copied())
        .collect();
    // Handed earlier, she stood further forward in the line as Redis held it before the
    // first unit came back.
    let rank: HashMap<u64, u64> = line_before
        .iter()
        .enumerate()
        .map(|(rank, user)| (*user, rank as u64))
        .collect();
    let places: Vec<u64> = handed
        .iter()
        .filter_map(|m| rank.get(&m.user).copied())
        .collect();
    let handed_behind = inversions(&places, |earlier, later| earlier > later);

    // The k-th line order took the k-th unit given back after those the buyers who came
    // before the line bought again (orders beyond the stock, less the line's).
    let resold = (record.orders.len() as u64).saturating_sub(record.initial_stock);
    let before_the_line = resold.saturating_sub(handed.len() as u64);
    let mut waits = Vec::new();
    for (k, member) in handed.iter().enumerate() {
        let k = before_the_line + k as u64;
        let returned = returns.iter().find(|(_, n)| *n > k);
        if let (Some((returned_at, _)), Some((_, heard_at)), false) = (
            returned,
            member.ordered,
            member.came_back || member.expired_unheard,
        ) {
            waits.push(((heard_at - returned_at).max(0.0) * 1e6) as u64);
        }
    }
    let first_return = returns.iter().find(|(_, n)| *n > 0).map_or(0.0, |r| r.0);
    let most = returns.last().map_or(0, |r| r.1);
    let last_return = returns
        .iter()
        .find(|(_, n)| *n == most)
        .map_or(0.0, |r| r.0);
    let count = |requests: fn(&Member) -> &Vec<String>| {
        let mut outcomes = BTreeMap::<String, u64>::new();
        for outcome in members.iter().flat_map(requests) {
            *outcomes.entry(outcome.clone()).or_default() += 1;
        }
        outcomes
    };
    let ordered = members.iter().filter(|m| m.ordered.is_some() && !m.bought);
    Line {
        poll_every_ms: POLL_EVERY.as_millis() as u64,
        members: joined.len() as u64,
        joins: count(|m| &m.joins),
        looks: count(|m| &m.looks),
        last_look_s: members
            .iter()
            .filter(|m| !m.looks.is_empty() && !m.came_back)
            .map(|m| m.last_at)
            .fold(0.0, f64::max),
        ordered: ordered.clone().count() as u64,
        heard_after_waiting: ordered.clone().filter(|m| m.came_back).count() as u64,
        expired_unheard: ordered.filter(|m| m.expired_unheard).count() as u64,
        line_orders: handed.len() as u64,
        outsiders: outsiders + bought_after,
        resold_before_the_line: before_the_line,
        placed: places.len() as u64,
        inversions: handed_behind,
        returned_while_waiting: most,
        return_to_ordered: Latency::of(&mut waits),
        returns_s: (first_return, last_return),
    }
}

/// Pairs (earlier, later) of `keys` for which `against` holds.
fn inversions(keys: &[u64], against: fn(u64, u64) -> bool) -> u64 {
    let mut count = 0;
    for (i, earlier) in keys.iter().enumerate() {
        count += keys[i + 1..]
            .iter()
            .filter(|later| against(*earlier, **later))
            .count() as u64;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inversions_count_pairs_out_of_order() {
        let further_back = |earlier, later| earlier > later;
        assert_eq!(inversions(&[1, 3, 4, 5], further_back), 0);
        assert_eq!(inversions(&[1, 4, 3, 5], further_back), 1);
        assert_eq!(inversions(&[3, 2, 1], further_back), 3);
    }
}
