//! The sale's promises under concurrency, against the built component and the real
//! backends: many buyers, each firing several purchases at once, with many requests in
//! flight. Afterwards MySQL must hold exactly the orders that were acknowledged, one per
//! buyer at most, no more than the stock, and Redis must agree with MySQL.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use reqwest::StatusCode;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use seckill_tests::app::{Answer, App};
use seckill_tests::invariants::{read, SaleRecord};

/// Requests in flight at once, through one shared client.
const IN_FLIGHT: usize = 64;

/// How one purchase ended. Anything else (a 5xx above all) is a failure of the sale.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ordered(u64),
    AlreadyOrdered(u64),
    SoldOut,
    Busy,
    Unexpected(String),
}

impl Outcome {
    fn of(answer: &Answer) -> Outcome {
        match (answer.status, answer.error()) {
            (StatusCode::CREATED, _) => match answer.order_id() {
                Some(id) => Outcome::Ordered(id),
                None => Outcome::Unexpected(format!("{answer:?}")),
            },
            (StatusCode::CONFLICT, "already_ordered") => match answer.order_id() {
                Some(id) => Outcome::AlreadyOrdered(id),
                None => Outcome::Unexpected(format!("{answer:?}")),
            },
            (StatusCode::CONFLICT, "sold_out") => Outcome::SoldOut,
            // A busy buyer is told when to come back.
            (StatusCode::TOO_MANY_REQUESTS, "busy") if retry_after(answer) >= Some(1) => {
                Outcome::Busy
            }
            _ => Outcome::Unexpected(format!("{answer:?}")),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Outcome::Ordered(_) => "201 ordered",
            Outcome::AlreadyOrdered(_) => "409 already_ordered",
            Outcome::SoldOut => "409 sold_out",
            Outcome::Busy => "429 busy",
            Outcome::Unexpected(_) => "unexpected",
        }
    }
}

fn retry_after(answer: &Answer) -> Option<u64> {
    answer
        .headers
        .get("retry-after")?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Every purchase of a run, as (buyer, outcome).
struct Run {
    outcomes: Vec<(u64, Outcome)>,
}

impl Run {
    /// Each buyer fires `repeats` purchases at once (they are queued next to each other),
    /// with at most [`IN_FLIGHT`] requests in flight overall.
    async fn fire(app: &Arc<App>, voucher: u64, buyers: &[u64], repeats: usize) -> Run {
        let gate = Arc::new(Semaphore::new(IN_FLIGHT));
        let mut tasks = JoinSet::new();
        for &buyer in buyers {
            for _ in 0..repeats {
                let (app, gate) = (app.clone(), gate.clone());
                tasks.spawn(async move {
                    let _permit = gate.acquire_owned().await.unwrap();
                    (buyer, Outcome::of(&app.buy(voucher, buyer).await))
                });
            }
        }
        let mut outcomes = Vec::new();
        while let Some(done) = tasks.join_next().await {
            outcomes.push(done.expect("a purchase task"));
        }
        Run { outcomes }
    }

    /// How many purchases ended each way, printed for the record.
    fn counts(&self, label: &str) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for (_, outcome) in &self.outcomes {
            *counts.entry(outcome.name()).or_default() += 1;
        }
        println!("{label}: {} requests: {counts:?}", self.outcomes.len());
        counts
    }

    /// The acknowledged orders as (order id, buyer).
    fn acknowledged(&self) -> Vec<(u64, u64)> {
        self.outcomes
            .iter()
            .filter_map(|(buyer, outcome)| match outcome {
                Outcome::Ordered(id) => Some((*id, *buyer)),
                _ => None,
            })
            .collect()
    }

    /// Checks every promise of a sale of `stock` units to `buyers` distinct buyers.
    async fn assert_sale(&self, voucher: u64, stock: u64, buyers: u64) -> SaleRecord {
        let unexpected: Vec<_> = self
            .outcomes
            .iter()
            .filter(|(_, outcome)| matches!(outcome, Outcome::Unexpected(_)))
            .collect();
        assert!(unexpected.is_empty(), "unexpected answers: {unexpected:#?}");

        let sold = stock.min(buyers);
        let acknowledged = self.acknowledged();
        let record = read(voucher).await;
        assert_eq!(record.orders.len() as u64, sold, "orders in MySQL");
        assert_eq!(acknowledged.len() as u64, sold, "201s");
        assert_eq!(record.mysql_stock, stock - sold, "MySQL stock");
        // One order per buyer, stock + orders = initial, every 201 is its buyer's row,
        // no order id acknowledged twice.
        record.assert_sound(&acknowledged);
        // Redis remaining = MySQL stock, nothing left pending.
        record.assert_redis_agrees();

        // A repeat names the buyer's one order.
        let order_of: HashMap<u64, u64> = record.orders.iter().map(|(o, u)| (*u, *o)).collect();
        for (buyer, outcome) in &self.outcomes {
            if let Outcome::AlreadyOrdered(id) = outcome {
                assert_eq!(order_of.get(buyer), Some(id), "buyer {buyer}'s repeat");
            }
        }
        record
    }
}

async fn start_sale(stock: u64) -> (Arc<App>, u64) {
    let app = App::start().await;
    let voucher = app.live_voucher(stock).await;
    (Arc::new(app), voucher)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_buyers_never_oversell_and_redis_agrees_with_mysql() {
    const STOCK: u64 = 50;
    const BUYERS: u64 = 500;
    let (app, voucher) = start_sale(STOCK).await;
    let buyers: Vec<u64> = (1..=BUYERS).collect();
    let run = Run::fire(&app, voucher, &buyers, 3).await;
    run.counts("S=50 U=500 R=3");
    run.assert_sale(voucher, STOCK, BUYERS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_buyer_bursting_gets_exactly_one_order() {
    const STOCK: u64 = 10;
    const BUYER: u64 = 7;
    let (app, voucher) = start_sale(STOCK).await;
    let run = Run::fire(&app, voucher, &[BUYER], 20).await;
    let counts = run.counts("one buyer x20");
    let record = run.assert_sale(voucher, STOCK, 1).await;
    assert_eq!(counts.get("201 ordered"), Some(&1));
    assert_eq!(counts.get("409 sold_out"), None);
    let order = *record.orders.keys().next().unwrap();
    assert_eq!(record.orders, HashMap::from([(order, BUYER)]));
    assert_eq!(record.redis_stock, Some((STOCK - 1) as i64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fewer_buyers_than_units_all_get_one() {
    const STOCK: u64 = 100;
    const BUYERS: u64 = 40;
    let (app, voucher) = start_sale(STOCK).await;
    let buyers: Vec<u64> = (1..=BUYERS).collect();
    let run = Run::fire(&app, voucher, &buyers, 2).await;
    let counts = run.counts("S=100 U=40 R=2");
    let record = run.assert_sale(voucher, STOCK, BUYERS).await;
    assert_eq!(counts.get("409 sold_out"), None);
    let served: HashSet<u64> = record.orders.values().copied().collect();
    assert_eq!(served, buyers.into_iter().collect());
    assert_eq!(record.redis_stock, Some(60));
}
