//! What a sale's shape costs an anonymous client, under real Spin (docs/design.md,
//! "Buckets"): a product page costs one script whatever the sale's buckets, the audits a
//! read sets off are one bucket's, a sold-out crowd's press one script too, and a sale is
//! reached by its own id only, never by a bucket's. Counted on a Redis of the test's own and a proxy in front of MySQL.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use reqwest::{Method, StatusCode};
use serde_json::json;

use seckill_core::sale::Keys;
use seckill_core::BucketId;
use seckill_tests::drivers::app::{behind_proxy, p3, Answer, App};
use seckill_tests::drivers::crowd::Storefront;
use seckill_tests::servers::faults::{redis_counters, Persistence, RedisServer};
use seckill_tests::servers::local::{mysql_rows, redis};
use seckill_tests::servers::proxy::{Proxy, ProxyStats};

/// The component on a Redis of its own, MySQL behind a counting proxy.
struct Rig {
    app: App,
    _redis: RedisServer,
    _proxy: Proxy,
    stats: Arc<ProxyStats>,
    counters: MultiplexedConnection,
}

impl Rig {
    async fn start() -> Rig {
        let redis = RedisServer::start(Persistence::None).await;
        let (proxy, _manifest, app) = behind_proxy(redis.port()).await;
        let counters = redis.conn().await;
        Rig {
            app,
            stats: proxy.stats(),
            _redis: redis,
            _proxy: proxy,
            counters,
        }
    }

    /// Redis scripts, Redis commands and MySQL statements so far.
    async fn counts(&mut self) -> Counts {
        let (commands, _) = redis_counters(&mut self.counters).await;
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.counters)
            .await
            .unwrap();
        let scripts = stats
            .lines()
            .filter(|line| {
                line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:")
            })
            .map(|line| {
                let calls = line.split_once("calls=").unwrap().1;
                calls.split(',').next().unwrap().parse::<u64>().unwrap()
            })
            .sum();
        Counts {
            scripts,
            // Without the INFO just sent.
            commands: commands - 1,
            statements: self.stats.statements.load(Ordering::SeqCst),
        }
    }

    /// A live sale of `stock` units in `buckets`.
    async fn sale(&self, stock: u64, buckets: u64) -> u64 {
        Storefront::new(self.app.base.clone())
            .create_bucketed(stock, buckets)
            .await
    }

    /// Reads the sale's page; asserts the whole stock is shown.
    async fn read(&self, sale: u64, stock: u64) {
        let page = self
            .app
            .call(Method::GET, &format!("/vouchers/{sale}"), None, None)
            .await;
        assert_eq!(page.status, StatusCode::OK, "{page:?}");
        assert_eq!(
            (&page.body["id"], &page.body["remaining"]),
            (&json!(sale), &json!(stock)),
            "{page:?}"
        );
    }
}

/// What the backends ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    scripts: u64,
    commands: u64,
    statements: u64,
}

impl std::ops::Sub for Counts {
    type Output = Counts;

    fn sub(self, before: Counts) -> Counts {
        Counts {
            scripts: self.scripts - before.scripts,
            commands: self.commands - before.commands,
            statements: self.statements - before.statements,
        }
    }
}

/// `GET path` as `user`.
async fn read_as(app: &App, path: &str, user: u64) -> Answer {
    app.get_as(path, user).await
}

/// The sale's buckets, itself first.
async fn buckets_of(sale: u64) -> Vec<u64> {
    mysql_rows(
        "SELECT voucher_id FROM tb_seckill_voucher WHERE sale_id = ? ORDER BY voucher_id",
        (sale,),
    )
    .await
}

const SHAPES: [u64; 3] = [1, 9, 64];
const READS: u64 = 20;
const STOCK: u64 = 128;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_page_costs_one_script_whatever_the_sale_s_buckets() {
    let mut rig = Rig::start().await;
    let mut whole = None;
    for buckets in SHAPES {
        let sale = rig.sale(STOCK, buckets).await;
        rig.read(sale, STOCK).await;
        let before = rig.counts().await;
        for _ in 0..READS {
            rig.read(sale, STOCK).await;
        }
        let cost = rig.counts().await - before;
        println!("sale_shape: {buckets} buckets: {READS} page reads: {cost:?}");
        // A script a read, the connection's commands as for one bucket, and the script's
        // read of the sale's summary; the other buckets summed once at most meanwhile (a
        // read of each, and the sum kept).
        let whole = *whole.get_or_insert(cost);
        assert_eq!(cost.scripts, READS, "{buckets} buckets");
        assert!(
            cost.commands <= whole.commands + READS + buckets,
            "{buckets} buckets: {cost:?}, one bucket: {whole:?}"
        );
        assert_eq!(cost.statements, 0, "{buckets} buckets");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_after_a_quiet_while_audits_one_bucket_whatever_the_sale_s_buckets() {
    let mut rig = Rig::start().await;
    let mut sales = Vec::new();
    for buckets in SHAPES {
        let sale = rig.sale(STOCK, buckets).await;
        rig.read(sale, STOCK).await;
        sales.push((buckets, sale));
    }
    // Past the audit interval (5 s) of every bucket of every sale.
    tokio::time::sleep(Duration::from_millis(5_300)).await;
    let mut whole = None;
    for (buckets, sale) in sales {
        let before = rig.counts().await;
        rig.read(sale, STOCK).await;
        // The audit runs after the answer.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let cost = rig.counts().await - before;
        println!("sale_shape: {buckets} buckets: a read after 5 s of quiet: {cost:?}");
        // One bucket's audit, as for a sale of one; the other buckets summed (a read of
        // each, and the sum kept).
        let whole = *whole.get_or_insert(cost);
        assert!(
            cost.statements > 0,
            "{buckets} buckets: the read audits: {cost:?}"
        );
        assert!(
            cost.scripts <= whole.scripts && cost.statements <= whole.statements,
            "{buckets} buckets: {cost:?}, one bucket: {whole:?}"
        );
        assert!(
            cost.commands <= whole.commands + 2 * buckets,
            "{buckets} buckets: {cost:?}, one bucket: {whole:?}"
        );
    }
}

#[tokio::test]
async fn a_bucket_s_id_is_no_voucher_on_any_public_route() {
    let app = App::start().await;
    let stock = 6;
    let sale = Storefront::new(app.base.clone())
        .create_bucketed(stock, 3)
        .await;
    let buckets = buckets_of(sale).await;
    assert_eq!(buckets.len(), 3);
    let buyer = 7_000_000 + u64::from(std::process::id() % 100_000) * 3;
    for &bucket in &buckets[1..] {
        let page = app
            .call(Method::GET, &format!("/vouchers/{bucket}"), None, None)
            .await;
        assert_eq!(
            (page.status, page.error()),
            (StatusCode::NOT_FOUND, "not_found"),
            "page of bucket {bucket}: {page:?}"
        );
        let press = app.buy(bucket, buyer).await;
        assert_eq!(
            (press.status, press.error()),
            (StatusCode::NOT_FOUND, "not_found"),
            "press at bucket {bucket}: {press:?}"
        );
        let mine = read_as(&app, &format!("/vouchers/{bucket}/orders/mine"), buyer).await;
        assert_eq!(mine.status, StatusCode::NOT_FOUND, "{mine:?}");
    }

    // Every buyer's receipt names the sale, whichever bucket sold to her.
    for user in buyer..buyer + stock {
        let receipt = app.buy(sale, user).await;
        assert_eq!(receipt.status, StatusCode::CREATED, "{receipt:?}");
        assert_eq!(receipt.body["voucher_id"], json!(sale), "{receipt:?}");
        let order = receipt.order_id().unwrap();
        let read = read_as(&app, &format!("/orders/{order}"), user).await;
        assert_eq!(read.body["voucher_id"], json!(sale), "{read:?}");
    }
    let sold_out = app.buy(sale, buyer + stock).await;
    assert_eq!(sold_out.error(), "sold_out", "{sold_out:?}");
    // No bucket sells on its own once the sale said sold_out.
    for &bucket in &buckets[1..] {
        let press = app.buy(bucket, buyer + stock).await;
        assert_eq!(press.status, StatusCode::NOT_FOUND, "{press:?}");
    }
}

#[tokio::test]
async fn a_sale_page_asked_with_a_query_string_is_refused() {
    let app = App::start().await;
    let sale = app.live_voucher(3).await;
    for query in ["nocache=1", "x", "a=b&c=d"] {
        let answer = app
            .call(
                Method::GET,
                &format!("/vouchers/{sale}?{query}"),
                None,
                None,
            )
            .await;
        assert_eq!(
            (answer.status, answer.error()),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "?{query}: {answer:?}"
        );
    }
    let page = app
        .call(Method::GET, &format!("/vouchers/{sale}"), None, None)
        .await;
    assert_eq!(page.status, StatusCode::OK, "{page:?}");
}

#[tokio::test]
async fn a_bucket_redis_lost_is_no_voucher_either() {
    let app = App::start().await;
    let sale = Storefront::new(app.base.clone())
        .create_bucketed(4, 2)
        .await;
    let bucket = buckets_of(sale).await[1];
    let _: () = redis()
        .await
        .del(Keys::new(BucketId::from_raw(bucket)).voucher())
        .await
        .unwrap();
    // MySQL is asked about an id Redis holds nothing of once a second, route-wide: the
    // others hear 503 meanwhile.
    let buyer = 9_100_000 + u64::from(std::process::id());
    let path = format!("/vouchers/{bucket}");
    let page = answered(|| app.call(Method::GET, &path, None, None)).await;
    assert_eq!(page.status, StatusCode::NOT_FOUND, "{page:?}");
    let press = answered(|| app.buy(bucket, buyer)).await;
    assert_eq!(press.status, StatusCode::NOT_FOUND, "{press:?}");
}

/// The first answer of `ask` other than a `503`, asked again for up to 10 s.
async fn answered<F: std::future::Future<Output = Answer>>(ask: impl Fn() -> F) -> Answer {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = ask().await;
        if answer.status != StatusCode::SERVICE_UNAVAILABLE || Instant::now() >= deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Sold-out presses of new buyers, one after another: what they cost in all.
async fn sold_out_presses(rig: &mut Rig, sale: u64, buyers: std::ops::Range<u64>) -> Counts {
    let before = rig.counts().await;
    for user in buyers {
        let press = rig.app.buy(sale, user).await;
        assert_eq!(
            (press.status, press.error()),
            (StatusCode::CONFLICT, "sold_out"),
            "{press:?}"
        );
    }
    let cost = rig.counts().await - before;
    assert_eq!(cost.statements, 0, "{cost:?}");
    cost
}

const CROWD: u64 = 20;

/// A quiet longer than a sighting of a sold-out bucket counts (`SIGHTING_MS`), and the
/// two of them shorter than a bucket's audit interval (5 s), which a press would pay for.
const QUIET: Duration = Duration::from_millis(1_200);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sold_out_crowd_costs_one_script_a_press_at_her_bucket_whatever_the_sale_s_buckets() {
    let mut rig = Rig::start().await;
    let base = 8_000_000 + u64::from(std::process::id() % 10_000) * 1_024;
    let mut costs = Vec::new();
    for (shape, buckets) in SHAPES.into_iter().enumerate() {
        // A unit a bucket, each sold to a buyer of that bucket (her id modulo the buckets).
        let sale = rig.sale(buckets, buckets).await;
        let first = base + shape as u64 * 256;
        let mut receipts = Vec::new();
        for user in first..first + buckets {
            let receipt = rig.app.buy(sale, user).await;
            assert_eq!(receipt.status, StatusCode::CREATED, "{receipt:?}");
            receipts.push((user, receipt.order_id().unwrap()));
        }
        // Nobody has found it sold out yet: the first press to do so walks the buckets.
        tokio::time::sleep(QUIET).await;
        let next = first + 64;
        let first_out = sold_out_presses(&mut rig, sale, next..next + 1).await;
        // A press alone after a quiet, then a crowd: each meets her bucket's mark.
        tokio::time::sleep(QUIET).await;
        let alone = sold_out_presses(&mut rig, sale, next + 1..next + 2).await;
        let crowd = sold_out_presses(&mut rig, sale, next + 2..next + 2 + CROWD).await;
        println!(
            "sale_shape: {buckets} buckets: the first sold-out press: {first_out:?}; one alone after a quiet: {alone:?}; {CROWD} in a row: {crowd:?}, {:.2} scripts and {:.1} commands a press",
            crowd.scripts as f64 / CROWD as f64,
            crowd.commands as f64 / CROWD as f64
        );
        costs.push((buckets, first_out.scripts, alone.scripts, crowd.scripts));
        // A unit cancelled in the last bucket sells at once to a buyer of another, marked
        // all out: the first receipt's bucket (an id the same modulo the buckets).
        let (owner, order) = *receipts.last().unwrap();
        let cancelled = rig
            .app
            .post_as(&format!("/orders/{order}/cancel"), owner)
            .await;
        assert_eq!(cancelled.status, StatusCode::OK, "{cancelled:?}");
        let buyer_of_the_first = first + buckets * (100 / buckets + 1);
        let bought = rig.app.buy(sale, buyer_of_the_first).await;
        assert_eq!(
            bought.status,
            StatusCode::CREATED,
            "{buckets} buckets: {bought:?}"
        );
    }
    // The first press to find the sale sold out walks every bucket, tells her home, and
    // marks the others: a script a bucket and a mark (and the first bucket's list, where
    // the press did not know it). Every press after it meets her home's mark, alone as in
    // a crowd, after the first bucket's list where her host keeps none.
    for (buckets, first_out, alone, crowd) in costs {
        let listed = if buckets > 1 && !p3() { 1 } else { 0 };
        // The default build keeps no list on one Redis (src/platform/p1/known_buckets.rs): every
        // press of a bucketed sale asks the first bucket for it.
        assert_eq!(
            crowd,
            CROWD * (1 + listed),
            "{buckets} buckets: {CROWD} in a row"
        );
        // An instance of the WASIp3 build keeps the buckets it learnt in its memory: one
        // the pool hands out afresh asks the first bucket for them first.
        let learning = if buckets > 1 && p3() { 1 } else { 0 };
        assert!(
            (1 + listed..=1 + listed + learning).contains(&alone),
            "{buckets} buckets: alone after a quiet {alone}"
        );
        assert!(
            if buckets == 1 {
                first_out == 1
            } else {
                first_out > buckets && first_out <= 2 * buckets + 1
            },
            "{buckets} buckets: the first {first_out}"
        );
    }
}
