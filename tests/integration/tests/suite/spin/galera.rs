//! MySQL as a Galera cluster (issue 49): three private MariaDB nodes behind a proxy that
//! spreads the component's connections over all of them (`seckill_tests::servers::galera`), so
//! that every node takes writes, with a Redis of its own. Row locks are local to a node
//! there: two nodes' transactions on the same row both run, and the later to certify
//! fails at COMMIT (1213), as does a local one a replicated write aborts. The component
//! runs each such transaction again whole; these tests hold it to every promise anyway.
//! Each test prints a line (`--nocapture`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use seckill_tests::drivers::app::{manifest, Answer, App, ADMIN_TOKEN};
use seckill_tests::drivers::invariants;
use seckill_tests::servers::faults::{backend_env, Persistence, RedisServer, Tally};
use seckill_tests::servers::galera::{Galera, Writers};

const FEED_TOKEN: &str = "integration-test-feed-token";
const PAYMENTS_TOKEN: &str = "integration-test-payments-token";
/// How many requests are in flight at once: more than the nodes, so each node has several.
const AT_ONCE: usize = 64;
/// Bound on a sale's settling (returns given back, the late buyers served).
const SETTLE: Duration = Duration::from_secs(30);

async fn app(cluster: &Galera, redis: &RedisServer) -> Arc<App> {
    let mut env = cluster.backend_env(redis.port());
    env.push(("SPIN_VARIABLE_FEED_TOKEN".into(), FEED_TOKEN.into()));
    env.push(("SPIN_VARIABLE_PAYMENTS_TOKEN".into(), PAYMENTS_TOKEN.into()));
    Arc::new(App::start_with(manifest(), env).await)
}

/// A live sale titled in Chinese (the cluster's database was created latin1), whose
/// buyers have `pay_within_s` to pay.
async fn voucher(app: &App, stock: u64, pay_within_s: u64) -> u64 {
    let terms = json!({"title": "秒杀 galera", "stock": stock, "pay_within_s": pay_within_s});
    let created = app.created(terms, -60, 3600).await;
    assert_eq!(created["title"], "秒杀 galera");
    created["id"].as_u64().unwrap()
}

/// Runs `each` for every one of `items`, [`AT_ONCE`] at a time; the answers in order.
async fn all_at_once<F, Fut>(items: Vec<u64>, each: F) -> Vec<(u64, Answer)>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Answer> + Send + 'static,
{
    let mut answers = Vec::new();
    for chunk in items.chunks(AT_ONCE) {
        let mut running = JoinSet::new();
        for &item in chunk {
            let answer = each(item);
            running.spawn(async move { (item, answer.await) });
        }
        while let Some(done) = running.join_next().await {
            answers.push(done.unwrap());
        }
    }
    answers.sort_by_key(|(item, _)| *item);
    answers
}

/// Every event of the feed, read a page at a time.
async fn feed(app: &App) -> Vec<Value> {
    let mut events = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let page = app
            .get(&format!("/events?after={cursor}&limit=500"), FEED_TOKEN)
            .await;
        assert_eq!(page.status, StatusCode::OK, "{page:?}\n{}", app.troubles());
        let got = page.body["events"].as_array().unwrap().clone();
        cursor = page.body["next"].as_str().unwrap().to_string();
        let done = got.len() < 500;
        events.extend(got);
        if done {
            return events;
        }
    }
}

/// Tallies answers by status and error code.
fn tally(answers: &[(u64, Answer)]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (_, answer) in answers {
        *counts
            .entry(format!("{} {}", answer.status.as_u16(), answer.error()))
            .or_default() += 1;
    }
    counts
}

/// `/health` says a node's reads may miss another node's commits until every node waits
/// for them (`wsrep_sync_wait`), which this sets.
async fn health_follows_sync_wait(cluster: &mut Galera, app: &Arc<App>) {
    let health = |expected: Value| {
        let app = app.clone();
        async move {
            let deadline = Instant::now() + SETTLE;
            loop {
                let health = app.get("/health", ADMIN_TOKEN).await;
                if health.body == expected || Instant::now() > deadline {
                    return health;
                }
                // Often: the WASIp3 build's instance keeps its MySQL connection, whose
                // session took `wsrep_sync_wait` when it opened, until Spin 4 retires the
                // instance after 128 requests.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let lagging = json!({"status": "degraded", "redis": "ok", "mysql": "ok",
        "mysql_reads": "may_lag"});
    let answer = health(lagging.clone()).await;
    assert_eq!((answer.status, &answer.body), (StatusCode::OK, &lagging));
    cluster
        .on_every_node("SET GLOBAL wsrep_sync_wait = 1")
        .await;
    let fresh = json!({"status": "ok", "redis": "ok", "mysql": "ok"});
    let answer = health(fresh.clone()).await;
    assert_eq!((answer.status, &answer.body), (StatusCode::OK, &fresh));
}

/// A sale's buyers all cancel at once, on one node, the others standing by.
#[tokio::test]
async fn cancellations_at_once_through_one_writer_are_all_answered_and_each_unit_sells_once() {
    cancellations_at_once(Writers::One).await;
}

/// The same on every node at once: settles take turns in Redis (`storage::turns`), so
/// that the three nodes' writers of the sale's stock row do not abort each other's
/// transactions, nor stall the cluster (docs/operations.md, "MySQL as a Galera cluster").
#[tokio::test]
async fn cancellations_at_once_on_every_node_are_all_answered_and_each_unit_sells_once() {
    cancellations_at_once(Writers::Every).await;
}

/// A sale's buyers all cancel at once through `writers`, and late buyers then press for
/// the units given back: every cancellation is answered 200, every unit sells once, and
/// the feed holds each order's events once, created before cancelled, and those written
/// one after another (each on the next node, where every node writes) in that order.
async fn cancellations_at_once(writers: Writers) {
    let cluster = Galera::start(writers).await;
    let redis = RedisServer::start(Persistence::None).await;
    let app = app(&cluster, &redis).await;
    let stock = 200;
    let voucher = voucher(&app, stock, 3600).await;

    let buyers: Vec<u64> = (1..=stock).map(|n| 9_490_000 + n).collect();
    let bought = all_at_once(buyers.clone(), |buyer| {
        let app = app.clone();
        async move { app.buy(voucher, buyer).await }
    })
    .await;
    let orders: BTreeMap<u64, u64> = bought
        .iter()
        .map(|(buyer, answer)| {
            assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
            (*buyer, answer.order_id().unwrap())
        })
        .collect();
    // A buyer told 201 reads her order at once, whichever node her read reaches.
    let read = all_at_once(buyers.clone(), |buyer| {
        let (app, order) = (app.clone(), orders[&buyer]);
        async move {
            let path = format!("/orders/{order}");
            app.get_as(&path, buyer).await
        }
    })
    .await;
    assert_eq!(
        tally(&read),
        BTreeMap::from([("200 ".to_string(), stock as usize)]),
        "{}",
        app.troubles()
    );

    let started = Instant::now();
    let cancelled = all_at_once(buyers.clone(), |buyer| {
        let (app, order) = (app.clone(), orders[&buyer]);
        async move { app.cancel(order, buyer).await }
    })
    .await;
    let cancelling = started.elapsed();
    assert_eq!(
        tally(&cancelled),
        BTreeMap::from([("200 ".to_string(), stock as usize)]),
        "{}",
        app.troubles()
    );

    // Late buyers press until every unit given back is sold: no more, no fewer.
    let late: Vec<u64> = (1..=2 * stock).map(|n| 9_495_000 + n).collect();
    let mut sold = BTreeSet::new();
    let deadline = Instant::now() + SETTLE;
    while (sold.len() as u64) < stock && Instant::now() < deadline {
        let waiting: Vec<u64> = late.iter().copied().filter(|b| !sold.contains(b)).collect();
        let answers = all_at_once(waiting, |buyer| {
            let app = app.clone();
            async move { app.buy(voucher, buyer).await }
        })
        .await;
        for (buyer, answer) in &answers {
            match (answer.status, answer.error()) {
                (StatusCode::CREATED, _) => {
                    sold.insert(*buyer);
                }
                (StatusCode::CONFLICT, "sold_out") => {}
                _ => panic!("buyer {buyer}: {answer:?}\n{}", app.troubles()),
            }
        }
    }
    assert_eq!(sold.len() as u64, stock, "late buyers sold to");

    // One after another, each on the next node: the feed keeps the order they committed in.
    let one_by_one: Vec<u64> = sold.iter().copied().take(6).collect();
    let mut late_orders = Vec::new();
    for buyer in &one_by_one {
        let path = format!("/vouchers/{voucher}/orders/mine");
        let mine = app.get_as(&path, *buyer).await;
        assert_eq!(mine.status, StatusCode::OK, "{mine:?}");
        let order: u64 = mine.body["order_id"].as_str().unwrap().parse().unwrap();
        let cancelled = app.cancel(order, *buyer).await;
        assert_eq!(cancelled.status, StatusCode::OK, "{cancelled:?}");
        late_orders.push(order.to_string());
    }

    let events = feed(&app).await;
    let cancelled_in_feed: Vec<String> = events
        .iter()
        .filter(|event| event["type"] == "order.cancelled")
        .map(|event| event["order_id"].as_str().unwrap().to_string())
        .filter(|order| late_orders.contains(order))
        .collect();
    assert_eq!(
        cancelled_in_feed, late_orders,
        "the feed keeps the commit order"
    );
    let mut seen = BTreeSet::new();
    let mut kinds: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for event in &events {
        assert!(seen.insert(event["id"].to_string()), "event twice: {event}");
        kinds
            .entry(event["order_id"].as_str().unwrap().to_string())
            .or_default()
            .push(event["type"].as_str().unwrap().to_string());
    }
    for order in orders
        .values()
        .map(u64::to_string)
        .chain(late_orders.clone())
    {
        assert_eq!(
            kinds[&order],
            ["order.created", "order.cancelled"],
            "order {order}"
        );
    }
    assert_eq!(kinds.len() as u64, 2 * stock, "an event list per order");
    println!(
        "galera, {writers:?} writing: {stock} bought, {stock} cancelled at once in {:.2} s, \
         {stock} sold again; {} certification failures, {} brute-force aborts",
        cancelling.as_secs_f64(),
        cluster.counted("wsrep_local_cert_failures").await,
        cluster.counted("wsrep_local_bf_aborts").await
    );
}

/// `/health` is degraded until every node waits for the cluster's commits (one cluster
/// start serves both checks). Then a sale sells out on every node, and while a second
/// crowd presses, a third of the buyers cancel, another third's orders are paid, the feed
/// is read page after page and one node is SIGKILLed and brought back; the last third's
/// orders, and those the crowd bought with the units given back, expire unpaid. Every
/// promise holds: each cancellation and payment answered (a request the dead node took
/// is asked again), no unit sold twice or lost, every buyer told 201 holds that order in
/// MySQL, one order a buyer, each order's events once in the feed, and at the end only
/// the paid orders hold units, in MySQL and in Redis.
#[tokio::test]
async fn health_then_a_node_killed_mid_sale_and_brought_back_keeps_every_promise() {
    let mut cluster = Galera::start(Writers::Every).await;
    let redis = RedisServer::start(Persistence::None).await;
    let app = app(&cluster, &redis).await;
    health_follows_sync_wait(&mut cluster, &app).await;
    // Long enough that every payment and cancellation of the first buyers, answered in
    // seconds by a loaded machine while a node is down, lands before its deadline.
    let (stock, pay_within) = (150, Duration::from_secs(20));
    let voucher = voucher(&app, stock, pay_within.as_secs()).await;
    let buyers: Vec<u64> = (1..=3 * stock).map(|n| 9_480_000 + n).collect();
    let (first, rest) = buyers.split_at(stock as usize);

    let press = |buyers: &[u64]| {
        let app = app.clone();
        all_at_once(buyers.to_vec(), move |buyer| {
            let app = app.clone();
            async move { app.buy(voucher, buyer).await }
        })
    };
    let mut purchases = Tally::default();
    for (buyer, answer) in press(first).await {
        purchases.purchase(buyer, &answer);
    }
    let sold_out_at = Instant::now();
    assert_eq!(purchases.acknowledged.len() as u64, stock, "{purchases}");
    let (cancels, pays): (Vec<_>, Vec<_>) = purchases
        .acknowledged
        .iter()
        .copied()
        .enumerate()
        .filter(|(n, _)| n % 3 != 2)
        .partition(|(n, _)| n % 3 == 0);
    let settle = |orders: Vec<(usize, (u64, u64))>, cancel: bool| {
        let app = app.clone();
        let by_order: BTreeMap<u64, u64> = orders.into_iter().map(|(_, order)| order).collect();
        all_at_once(by_order.keys().copied().collect(), move |order| {
            let (app, buyer) = (app.clone(), by_order[&order]);
            async move {
                until_answered(|| async {
                    if cancel {
                        app.cancel(order, buyer).await
                    } else {
                        let path = format!("/orders/{order}/pay");
                        app.post(&path, PAYMENTS_TOKEN).await
                    }
                })
                .await
            }
        })
    };
    let reading = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let reader = tokio::spawn(read_the_feed_while(app.clone(), reading.clone()));
    let crowd = tokio::spawn(press(rest));
    let cancelled = tokio::spawn(settle(cancels.clone(), true));
    let paid = tokio::spawn(settle(pays.clone(), false));
    tokio::time::sleep(Duration::from_millis(100)).await;
    cluster.kill(1);
    for (buyer, answer) in crowd.await.unwrap() {
        purchases.purchase(buyer, &answer);
    }
    let (cancelled, paid) = (cancelled.await.unwrap(), paid.await.unwrap());
    cluster.restart(1).await;
    reading.store(false, std::sync::atomic::Ordering::Relaxed);
    let pages = reader.await.unwrap();
    let expected = |n: usize| BTreeMap::from([("200 ".to_string(), n)]);
    assert_eq!(
        tally(&cancelled),
        expected(cancels.len()),
        "{}",
        app.troubles()
    );
    assert_eq!(tally(&paid), expected(pays.len()), "{}", app.troubles());
    // Those told busy or unavailable press again, now the node is back.
    let again: Vec<u64> = buyers
        .iter()
        .copied()
        .filter(|buyer| !purchases.acknowledged.iter().any(|(_, user)| user == buyer))
        .collect();
    for (buyer, answer) in press(&again).await {
        purchases.purchase(buyer, &answer);
    }

    // Every unpaid order's deadline passes; the admin's sweeps expire them.
    tokio::time::sleep(pay_within.saturating_sub(sold_out_at.elapsed())).await;
    let deadline = Instant::now() + pay_within + SETTLE;
    let sale = loop {
        let path = format!("/vouchers/{voucher}/expire");
        app.post(&path, ADMIN_TOKEN).await;
        let pool = mysql_async::Pool::new(cluster.url().as_str());
        let sale = invariants::read_on(voucher, pool, redis.conn().await).await;
        if (sale.settled() && sale.live_orders() == pays.len() as u64) || Instant::now() > deadline
        {
            break sale;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    sale.assert_settled(&purchases.acknowledged);
    assert_eq!(
        (sale.live_orders(), sale.mysql_stock),
        (pays.len() as u64, stock - pays.len() as u64),
        "only the paid orders hold units: {purchases}\n{}",
        app.troubles()
    );
    let mut terminal = BTreeMap::new();
    for event in feed(&app).await {
        let order: u64 = event["order_id"].as_str().unwrap().parse().unwrap();
        if event["type"] != "order.created" {
            let kind = event["type"].as_str().unwrap().to_string();
            assert_eq!(terminal.insert(order, kind), None, "two ends: {event}");
        }
    }
    for (order, _) in &purchases.acknowledged {
        let status = match sale.statuses[order] {
            2 => "order.paid",
            4 => "order.cancelled",
            7 => "order.expired",
            other => panic!("order {order}: status {other}"),
        };
        assert_eq!(
            terminal.get(order).map(String::as_str),
            Some(status),
            "order {order}"
        );
    }
    println!(
        "galera, node 1 of 3 SIGKILLed mid-sale and brought back: {purchases}; {} cancelled, {} \
         paid, {} sold in all, {pages} feed pages read meanwhile; {} certification \
         failures, {} brute-force aborts",
        cancels.len(),
        pays.len(),
        purchases.acknowledged.len(),
        cluster.counted("wsrep_local_cert_failures").await,
        cluster.counted("wsrep_local_bf_aborts").await
    );
}

/// Asks until the answer is neither a `503` (the node a request reached was killed under
/// it) nor, after one, a `429` (a buyer's cancellations that changed nothing ask MySQL
/// once a second), ten times at most: a settle is safe to ask again.
async fn until_answered<F, Fut>(ask: F) -> Answer
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Answer>,
{
    for _ in 1..10 {
        let answer = ask().await;
        match answer.status {
            StatusCode::SERVICE_UNAVAILABLE => tokio::time::sleep(Duration::from_millis(200)).await,
            StatusCode::TOO_MANY_REQUESTS => tokio::time::sleep(Duration::from_secs(1)).await,
            _ => return answer,
        }
    }
    ask().await
}

/// Reads the feed from its start, page after page, while `reading`: how many pages were
/// read (a `503` from a node killed under a read is read again).
async fn read_the_feed_while(app: Arc<App>, reading: Arc<std::sync::atomic::AtomicBool>) -> usize {
    let (mut cursor, mut pages) = ("0".to_string(), 0);
    while reading.load(std::sync::atomic::Ordering::Relaxed) {
        let path = format!("/events?after={cursor}&limit=50");
        let page = app.get(&path, FEED_TOKEN).await;
        match page.status {
            StatusCode::OK => {
                cursor = page.body["next"].as_str().unwrap().to_string();
                pages += 1;
            }
            StatusCode::SERVICE_UNAVAILABLE => {}
            _ => panic!("a feed page: {page:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pages
}

/// The same crowd sale on one server (the suites' MariaDB) and on the cluster through each
/// topology, each buyer pressing once, 64 at a time, and then its buyers all cancelling at
/// once: the times to the last answers, printed (a measurement for docs/operations.md, run
/// by scripts/test-galera.sh --soak).
#[tokio::test]
#[ignore = "a measurement: scripts/test-galera.sh --soak"]
async fn a_sale_s_clock_on_the_cluster_beside_one_server() {
    let (stock, crowd) = (300, 1_200);
    let mut clocks = Vec::new();
    for topology in [None, Some(Writers::One), Some(Writers::Every)] {
        let redis = RedisServer::start(Persistence::None).await;
        let cluster = match topology {
            Some(writers) => Some(Galera::start(writers).await),
            None => None,
        };
        let env = match &cluster {
            Some(cluster) => cluster.backend_env(redis.port()),
            None => backend_env(redis.port(), 3306),
        };
        let app = Arc::new(App::start_with(manifest(), env).await);
        let voucher = voucher(&app, stock, 3600).await;
        let buyers: Vec<u64> = (1..=crowd).map(|n| 9_470_000 + n).collect();
        let started = Instant::now();
        let answers = all_at_once(buyers, |buyer| {
            let app = app.clone();
            async move { app.buy(voucher, buyer).await }
        })
        .await;
        let clock = started.elapsed();
        let counts = tally(&answers);
        assert_eq!(counts.get("201 "), Some(&(stock as usize)), "{counts:?}");
        let orders: BTreeMap<u64, u64> = answers
            .iter()
            .filter_map(|(buyer, answer)| Some((answer.order_id()?, *buyer)))
            .collect();
        let started = Instant::now();
        let cancelled = all_at_once(orders.keys().copied().collect(), |order| {
            let (app, buyer) = (app.clone(), orders[&order]);
            async move { app.cancel(order, buyer).await }
        })
        .await;
        let cancelling = started.elapsed();
        let counts = tally(&cancelled);
        assert_eq!(counts.get("200 "), Some(&(stock as usize)), "{counts:?}");
        clocks.push(format!(
            "{}: {:.2} s, cancelled in {:.2} s",
            topology.map_or("one server".to_string(), |writers| format!("{writers:?}")),
            clock.as_secs_f64(),
            cancelling.as_secs_f64()
        ));
    }
    println!(
        "galera sale clock, {stock} units, {crowd} buyers pressing once, 64 at a time, then \
         the {stock} buyers cancelling at once: {}",
        clocks.join(", ")
    );
}
