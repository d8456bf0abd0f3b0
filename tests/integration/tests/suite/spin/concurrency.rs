//! The sale's promises under concurrency, against the built component and the real
//! backends: many buyers, each firing several purchases at once, with many requests in
//! flight, and a burst of buyers three times the stock where admission decides every
//! buyer at once and MySQL sees only the group commits. Afterwards MySQL must hold
//! exactly the orders that were acknowledged, one per buyer at most, no more than the
//! stock, and Redis must agree with MySQL with nothing left queued.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use seckill_tests::drivers::app::{behind_proxy, p3, Answer, App};
use seckill_tests::drivers::invariants::{read, SaleRecord};

/// Requests in flight at once, through one shared client.
const IN_FLIGHT: usize = 64;
/// The shared Redis (`seckill_tests::servers::local::REDIS_URL`).
const REDIS_PORT: u16 = 6379;

/// How one purchase ended. Anything else (a 5xx above all) is a failure of the sale.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ordered(u64),
    AlreadyOrdered(u64),
    SoldOut,
    Busy,
    Throttled,
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
            (StatusCode::TOO_MANY_REQUESTS, "busy") if retry_after(answer) == Some(1) => {
                Outcome::Busy
            }
            (StatusCode::TOO_MANY_REQUESTS, "throttled") if retry_after(answer) == Some(1) => {
                Outcome::Throttled
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
            Outcome::Throttled => "429 throttled",
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

/// Every purchase of a run, as (buyer, final outcome), how many answers said to retry,
/// and how many times each buyer pressed.
struct Run {
    outcomes: Vec<(u64, Outcome)>,
    retried: usize,
    presses: HashMap<u64, usize>,
}

impl Run {
    /// Each buyer fires `repeats` purchases at once (they are queued next to each other),
    /// with at most [`IN_FLIGHT`] requests in flight overall. A purchase told `throttled`
    /// is tried again after `Retry-After`, as a storefront would; so is one told `busy`
    /// when `retry_busy`.
    async fn fire(
        app: &Arc<App>,
        voucher: u64,
        buyers: &[u64],
        repeats: usize,
        retry_busy: bool,
    ) -> Run {
        let gate = Arc::new(Semaphore::new(IN_FLIGHT));
        let mut tasks = JoinSet::new();
        for &buyer in buyers {
            for _ in 0..repeats {
                let (app, gate) = (app.clone(), gate.clone());
                tasks.spawn(async move {
                    let mut retried = 0;
                    loop {
                        let permit = gate.acquire().await.unwrap();
                        let answer = app.buy(voucher, buyer).await;
                        drop(permit);
                        let outcome = Outcome::of(&answer);
                        let again = outcome == Outcome::Throttled
                            || (retry_busy && outcome == Outcome::Busy);
                        if !again {
                            return (buyer, outcome, retried);
                        }
                        retried += 1;
                        let wait = retry_after(&answer).unwrap_or(1);
                        tokio::time::sleep(Duration::from_secs(wait)).await;
                    }
                });
            }
        }
        let (mut outcomes, mut retried, mut presses) = (Vec::new(), 0, HashMap::new());
        while let Some(done) = tasks.join_next().await {
            let (buyer, outcome, retries) = done.expect("a purchase task");
            outcomes.push((buyer, outcome));
            retried += retries;
            *presses.entry(buyer).or_default() += 1 + retries;
        }
        Run {
            outcomes,
            retried,
            presses,
        }
    }

    /// How many purchases ended each way, printed for the record.
    fn counts(&self, label: &str) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for (_, outcome) in &self.outcomes {
            *counts.entry(outcome.name()).or_default() += 1;
        }
        println!(
            "{label}: {} purchases: {counts:?}, {} answers to retry",
            self.outcomes.len(),
            self.retried
        );
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
        // Redis remaining = MySQL stock, nothing left queued.
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
    let run = Run::fire(&app, voucher, &buyers, 3, false).await;
    run.counts("S=50 U=500 R=3");
    run.assert_sale(voucher, STOCK, BUYERS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_buyer_bursting_gets_exactly_one_order() {
    const STOCK: u64 = 10;
    const BUYER: u64 = 7;
    let (app, voucher) = start_sale(STOCK).await;
    let run = Run::fire(&app, voucher, &[BUYER], 20, false).await;
    let counts = run.counts("one buyer x20");
    let record = run.assert_sale(voucher, STOCK, 1).await;
    // One press is admitted; the others hear her order, or `busy` while it is queued.
    assert_eq!(counts.get("201 ordered"), Some(&1));
    let others =
        counts.get("409 already_ordered").unwrap_or(&0) + counts.get("429 busy").unwrap_or(&0);
    assert_eq!(others, 19, "{counts:?}");
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
    let run = Run::fire(&app, voucher, &buyers, 2, false).await;
    let counts = run.counts("S=100 U=40 R=2");
    let record = run.assert_sale(voucher, STOCK, BUYERS).await;
    assert_eq!(counts.get("409 sold_out"), None);
    let served: HashSet<u64> = record.orders.values().copied().collect();
    assert_eq!(served, buyers.into_iter().collect());
    assert_eq!(record.redis_stock, Some(60));
}

/// A burst of 900 buyers for 300 units, 64 requests in flight, each buyer pressing once.
/// Admission decides every buyer: exactly 300 hear 201 and 600 hear `sold_out`, nobody is
/// told to come back (the queue never nears its limit of 8,192 with 64 in flight, and every
/// admitted purchase is committed well within a waiter's 10 s), and no 5xx. MySQL is
/// reached through a counting proxy: the bound measured is how many connections the
/// component opened during the burst (drainers, one group commit each, and a press every
/// 5 s that sweeps to audit MySQL) and how many were open at once (one drainer per
/// voucher, two while a lease lapses or passes on, and the audit's).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_buyers_is_decided_at_admission_with_few_mysql_connections() {
    const STOCK: u64 = 300;
    const BUYERS: u64 = 900;
    // Drainers take turns on the lease, each turn one connection and one batch. Measured:
    // 10, as the first batch is one purchase and each later one holds those admitted while
    // the batch before it committed, about half of the 64 in flight. The bound leaves
    // room for a loaded machine and is a twentieth of one connection per order.
    const MAX_CONNECTIONS: u64 = 15;
    // The drainer handing the lease on still holds its connection while the next opens;
    // and one press every 5 s sweeps, auditing MySQL's orders (see docs/design.md, "MySQL
    // behind Redis"), on a connection of its own.
    const MAX_OPEN_AT_ONCE: u64 = 3;
    let (proxy, _manifest, app) = behind_proxy(REDIS_PORT).await;
    let app = Arc::new(app);
    let voucher = app.live_voucher(STOCK).await;
    let stats = proxy.stats();
    let (connections, statements) = (
        stats.forwarded.load(Ordering::SeqCst),
        stats.statements.load(Ordering::SeqCst),
    );
    proxy.reset_peak();

    let buyers: Vec<u64> = (1..=BUYERS).collect();
    let started = Instant::now();
    let run = Run::fire(&app, voucher, &buyers, 1, true).await;
    let took = started.elapsed();
    let opened = stats.forwarded.load(Ordering::SeqCst) - connections;
    let calls = stats.statements.load(Ordering::SeqCst) - statements;
    let peak = stats.peak_open.load(Ordering::SeqCst);
    let counts = run.counts(&format!(
        "burst S=300 U=900 in {took:?}: {opened} MySQL connections opened, at most {peak} open at once, {calls} statements"
    ));
    let record = run.assert_sale(voucher, STOCK, BUYERS).await;
    assert_eq!(counts.get("201 ordered"), Some(&300));
    assert_eq!(counts.get("409 sold_out"), Some(&600));
    assert_eq!(counts.values().sum::<usize>(), 900, "{counts:?}");
    assert_eq!(run.retried, 0, "answers to retry");
    assert_eq!(run.presses.len(), 900);
    assert!(
        run.presses.values().all(|&n| n == 1),
        "a buyer pressed twice"
    );
    assert_eq!(record.mysql_stock, 0);
    // Plus the audits, one every 5 s at most (a burst of this size lasts a second or two).
    let audits = took.as_secs() / 5 + 1;
    assert!(
        (1..=MAX_CONNECTIONS + audits).contains(&opened),
        "{opened} MySQL connections for the burst"
    );
    // A WASIp3 instance closes a connection only once none of its MySQL calls is under
    // way (src/platform/p3/mysql.rs): in a burst, one given back may wait open for a while.
    let max_open = if p3() {
        MAX_CONNECTIONS
    } else {
        MAX_OPEN_AT_ONCE
    };
    assert!(peak <= max_open, "{peak} MySQL connections open at once");
    assert!(took < Duration::from_secs(60), "the burst took {took:?}");
}
