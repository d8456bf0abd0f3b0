//! A MySQL failover on this machine (issue 40): orders committed through a proxy in front
//! of a private MariaDB primary, its GTID replica made to lag, then the primary killed and
//! the replica promoted behind the same proxy (`seckill_tests::servers::mysql_pair`).
//!
//! Asynchronous replication loses exactly the orders acknowledged while the replica lagged.
//! Semi-synchronous replication (AFTER_SYNC) answers none of them until the replica has
//! them, so it loses no acknowledged order; the one it was holding dies with the primary,
//! unanswered. Those tests are the group commit's own `CALL`s, without Spin.
//!
//! The sale tests run the built component under Spin through the same failover, with a
//! Redis of their own: every order a buyer was told of is hers in MySQL again within
//! seconds (asynchronous replication loses some, and the sale's sweeps commit them again
//! from Redis), and `/health` says `degraded` meanwhile.
//! Each test prints a line (`cargo test -p seckill-tests --test suite -- spin::mysql_failover:: --nocapture`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use redis::AsyncCommands;
use seckill_core::sale::Keys;
use seckill_core::sql;
use seckill_core::verdict::Verdict;
use seckill_core::{BucketId, OrderId, UserId};
use seckill_tests::drivers::app::{manifest, App, ADMIN_TOKEN};
use seckill_tests::drivers::scripts::commit_batch_on;
use seckill_tests::servers::faults::{Persistence, RedisServer};
use seckill_tests::servers::local::rows_at;
use seckill_tests::servers::mysql_pair::{MysqlPair, Replication};
use tokio::task::{JoinHandle, JoinSet};

/// Orders committed while the replica receives, and then tried while it lags.
const BEFORE: u64 = 3;
const WHILE_LAGGING: u64 = 3;
/// How long a semi-sync commit is watched not being answered.
const HELD: Duration = Duration::from_millis(1500);
/// Bound on anything that should be quick.
const QUICK: Duration = Duration::from_secs(10);

async fn create_voucher(pair: &MysqlPair, stock: u32) -> BucketId {
    let at = |offset: i64| {
        (chrono::Utc::now() + chrono::Duration::seconds(offset))
            .format("%Y-%m-%d %H:%M:%S")
            .to_string()
    };
    let mut conn = Conn::from_url(pair.url()).await.unwrap();
    // One bucket: its id, its share (the whole stock) and when it was created.
    let created: Option<(u64, u64, i64)> = conn
        .exec_first(
            sql::CREATE_VOUCHER,
            (
                "failover",
                "",
                stock,
                at(-60),
                at(3600),
                900,
                1,
                0,
                None::<String>,
                1,
                None::<String>,
            ),
        )
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    BucketId::from_raw(created.unwrap().0)
}

/// Order `n` (by buyer `n`) committed as the drainer commits a batch of one, on a
/// connection of its own through `url`.
async fn order(url: &str, voucher: BucketId, n: u64) -> Result<(), mysql_async::Error> {
    let mut conn = Conn::from_url(url).await?;
    // Of a second far ahead: the group commit takes no order admitted before the voucher.
    let batch = [(OrderId::from_raw(1 << 62 | n), UserId::from_raw(n))];
    let committed = commit_batch_on(&mut conn, voucher, &batch).await?;
    assert_eq!(committed.verdicts, [Verdict::Ordered], "order {n}");
    conn.disconnect().await?;
    Ok(())
}

/// Orders `first..first + count`, one after the other, in a task; each acknowledged one is
/// added to `acknowledged`. Stops at the first error.
fn orders_in_task(
    pair: &MysqlPair,
    voucher: BucketId,
    first: u64,
    count: u64,
    acknowledged: Arc<Mutex<Vec<u64>>>,
) -> JoinHandle<Result<(), mysql_async::Error>> {
    let url = pair.url();
    tokio::spawn(async move {
        for n in first..first + count {
            order(&url, voucher, n).await?;
            acknowledged.lock().unwrap().push(n);
        }
        Ok(())
    })
}

/// The voucher's orders as the primary behind the proxy holds them, each by its `n`
/// (its buyer's id: [`order`]).
async fn orders_present(pair: &MysqlPair, voucher: BucketId) -> BTreeSet<u64> {
    let sql = "SELECT user_id FROM tb_voucher_order WHERE voucher_id = ?";
    let ids: Vec<u64> = rows_at(&pair.url(), sql, (voucher.raw(),)).await;
    ids.into_iter().collect()
}

/// Shows a semi-sync commit held: once the primary says a session waits for the replica's
/// acknowledgement (not for a lock), it stays unanswered for [`HELD`], and the primary
/// has not gone asynchronous.
async fn assert_held(pair: &MysqlPair, task: &mut JoinHandle<Result<(), mysql_async::Error>>) {
    let deadline = Instant::now() + QUICK;
    while pair
        .primary_status("Rpl_semi_sync_master_wait_sessions")
        .await
        != "1"
    {
        assert!(!task.is_finished(), "a commit was answered while lagging");
        assert!(Instant::now() < deadline, "no commit waits for the replica");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        tokio::time::timeout(HELD, &mut *task).await.is_err(),
        "a commit was answered while the semi-sync replica received nothing"
    );
    assert_eq!(
        pair.primary_status("Rpl_semi_sync_master_wait_sessions")
            .await,
        "1"
    );
    assert_eq!(
        pair.primary_status("Rpl_semi_sync_master_status").await,
        "ON"
    );
    assert_eq!(pair.primary_status("Rpl_semi_sync_master_no_tx").await, "0");
}

/// Orders before the lag, orders while lagging, failover, one order after it; then checks
/// what was lost against what the mode promises.
async fn failover(mode: Replication) {
    let started = Instant::now();
    let mut pair = MysqlPair::start(mode).await;
    let ready = started.elapsed();
    let voucher = create_voucher(&pair, 100).await;
    let url = pair.url();
    let mut acknowledged: BTreeSet<u64> = BTreeSet::new();
    for n in 1..=BEFORE {
        order(&url, voucher, n).await.unwrap();
        acknowledged.insert(n);
    }

    pair.lag().await;
    let while_lagging = Arc::new(Mutex::new(Vec::new()));
    let mut task = orders_in_task(
        &pair,
        voucher,
        BEFORE + 1,
        WHILE_LAGGING,
        while_lagging.clone(),
    );
    // The semi-sync commits, still held at the failover.
    let held = match mode {
        Replication::Async => {
            let done = tokio::time::timeout(QUICK, task).await;
            done.expect("async commits are answered").unwrap().unwrap();
            None
        }
        Replication::SemiSync => {
            assert_held(&pair, &mut task).await;
            Some(task)
        }
    };

    let killed = Instant::now();
    let failover = pair.fail_over().await;
    if let Some(task) = held {
        // It loses its connection: unanswered.
        let ended = tokio::time::timeout(QUICK, task)
            .await
            .expect("the held commit ends with the primary")
            .unwrap();
        assert!(ended.is_err(), "the held commit was never answered");
    }
    let after = BEFORE + WHILE_LAGGING + 1;
    order(&url, voucher, after)
        .await
        .expect("the promoted replica takes orders through the proxy");
    let writable = killed.elapsed();
    acknowledged.extend(while_lagging.lock().unwrap().iter().copied());
    acknowledged.insert(after);

    let present = orders_present(&pair, voucher).await;
    assert!(
        present.is_subset(&acknowledged),
        "orders nobody was told of: {present:?} of {acknowledged:?}"
    );
    let lost: BTreeSet<u64> = acknowledged.difference(&present).copied().collect();
    let acked_while_lagging = while_lagging.lock().unwrap().len() as u64;
    match mode {
        Replication::Async => {
            assert_eq!(acked_while_lagging, WHILE_LAGGING);
            let expected: BTreeSet<u64> = (BEFORE + 1..=BEFORE + WHILE_LAGGING).collect();
            assert_eq!(
                lost, expected,
                "async loses exactly what the replica missed"
            );
        }
        Replication::SemiSync => {
            assert_eq!(acked_while_lagging, 0);
            assert!(
                lost.is_empty(),
                "semi-sync lost acknowledged orders {lost:?}"
            );
        }
    }
    println!(
        "{mode:?}: {} orders acknowledged ({BEFORE} before the lag, {acked_while_lagging} of \
         {WHILE_LAGGING} tried while lagging, 1 after the failover), {} present after the \
         failover, {} lost; failover {:.3} s (kill to proxy moved), first order on the new \
         primary {:.3} s after the kill ({:.1} s to start the pair)",
        acknowledged.len(),
        present.len(),
        lost.len(),
        failover.as_secs_f64(),
        writable.as_secs_f64(),
        ready.as_secs_f64(),
    );
}

#[tokio::test]
async fn async_failover_loses_the_orders_committed_while_the_replica_lagged() {
    failover(Replication::Async).await;
}

#[tokio::test]
async fn semi_sync_failover_loses_no_acknowledged_order() {
    failover(Replication::SemiSync).await;
}

/// The held commit waits for the replica, and nothing else: once it receives again, the
/// commit is answered, and survives a failover.
#[tokio::test]
async fn semi_sync_commit_held_while_lagging_is_answered_once_the_replica_receives() {
    let mut pair = MysqlPair::start(Replication::SemiSync).await;
    let voucher = create_voucher(&pair, 100).await;
    pair.lag().await;
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let mut task = orders_in_task(&pair, voucher, 1, 1, acknowledged.clone());
    assert_held(&pair, &mut task).await;
    let resumed = Instant::now();
    pair.resume().await;
    tokio::time::timeout(QUICK, task)
        .await
        .expect("the held commit is answered once the replica receives")
        .unwrap()
        .unwrap();
    let answered = resumed.elapsed();
    let failover = pair.fail_over().await;
    let present = orders_present(&pair, voucher).await;
    assert_eq!(present, BTreeSet::from([1]));
    println!(
        "SemiSync, resumed: the held order was answered {:.3} s after the replica received \
         again, and is present after a failover of {:.3} s",
        answered.as_secs_f64(),
        failover.as_secs_f64()
    );
}

/// Every buyer's press of a sale through the failover, by what she was told.
#[derive(Default)]
struct Told {
    /// buyer -> the order id she was told (201, or `409 already_ordered`).
    orders: BTreeMap<u64, u64>,
    /// 5xx answers, by status and error code.
    errors: BTreeMap<String, usize>,
    presses: usize,
}

impl Told {
    fn hear(&mut self, buyer: u64, answer: &seckill_tests::drivers::app::Answer) {
        self.presses += 1;
        match (answer.status.as_u16(), answer.order_id()) {
            (201, Some(order)) | (409, Some(order)) => {
                let earlier = self.orders.insert(buyer, order);
                assert!(
                    earlier.is_none_or(|earlier| earlier == order),
                    "buyer {buyer} was told two orders"
                );
            }
            (status, _) if status >= 500 => {
                *self
                    .errors
                    .entry(format!("{status} {}", answer.error()))
                    .or_default() += 1;
            }
            _ => {}
        }
    }
}

/// Each of `buyers` presses once, all at once; what they were told joins `told`.
async fn press(
    app: &Arc<App>,
    voucher: u64,
    buyers: std::ops::Range<u64>,
    told: &Arc<Mutex<Told>>,
) {
    let mut presses = JoinSet::new();
    for buyer in buyers {
        let (app, told) = (app.clone(), told.clone());
        presses.spawn(async move {
            let answer = app.buy(voucher, buyer).await;
            told.lock().unwrap().hear(buyer, &answer);
        });
    }
    while let Some(pressed) = presses.join_next().await {
        pressed.expect("a press");
    }
}

/// The sale as MySQL (through the proxy) holds it: its stock and its live orders by buyer.
async fn mysql_sale(pair: &MysqlPair, voucher: u64) -> (u64, BTreeMap<u64, u64>) {
    let mut conn = Conn::from_url(pair.url()).await.unwrap();
    let stock: u64 = conn
        .exec_first(
            "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?",
            (voucher,),
        )
        .await
        .unwrap()
        .unwrap();
    let rows: Vec<(u64, u64)> = conn
        .exec(
            "SELECT user_id, id FROM tb_voucher_order WHERE voucher_id = ? AND status NOT IN (4, 7)",
            (voucher,),
        )
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    let mut orders = BTreeMap::new();
    for (buyer, order) in rows {
        assert!(
            orders.insert(buyer, order).is_none(),
            "buyer {buyer} holds two orders"
        );
    }
    (stock, orders)
}

/// While a transaction of the test's writes one of the orders MySQL lost and does not
/// commit, so that the heal's commit of it waits on its key until it gives up (the
/// audit's read of MySQL's count does not wait), buyers told of their orders press again:
/// the audit finds the loss, the heal fails on the lock, and `/health` says `degraded`,
/// naming the voucher, until the lock goes.
async fn assert_degraded_while_the_heal_is_held(
    pair: &MysqlPair,
    app: &Arc<App>,
    voucher: u64,
    told: &Arc<Mutex<Told>>,
) {
    let held = mysql_sale(pair, voucher).await.1;
    let (buyer, order) = told
        .lock()
        .unwrap()
        .orders
        .iter()
        .map(|(&buyer, &order)| (buyer, order))
        .find(|(buyer, _)| !held.contains_key(buyer))
        .expect("an order MySQL lost");
    let mut hold = Conn::from_url(pair.url()).await.unwrap();
    hold.query_drop("START TRANSACTION").await.unwrap();
    hold.exec_drop(
        "INSERT INTO tb_voucher_order \
         (id, user_id, voucher_id, sale_id, status, create_time, expire_time) \
         VALUES (?, ?, ?, ?, 1, UTC_TIMESTAMP(), UTC_TIMESTAMP() + INTERVAL 1 HOUR)",
        (order, buyer, voucher, voucher),
    )
    .await
    .unwrap();
    let deadline = Instant::now() + QUICK;
    loop {
        press(app, voucher, 1..4, told).await;
        let health = app.get("/health", ADMIN_TOKEN).await;
        if health.body["status"] == "degraded" {
            assert_eq!(health.status, 200, "{}", health.body);
            assert_eq!(
                health.body["mysql_behind_vouchers"],
                serde_json::json!([voucher])
            );
            break;
        }
        assert_eq!(health.body["status"], "ok", "{}", health.body);
        assert!(Instant::now() < deadline, "/health never said degraded");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    hold.query_drop("ROLLBACK").await.unwrap();
    hold.disconnect().await.unwrap();
}

/// A sale of `stock` units: a third of them sold while the replica receives, a third while
/// it lags, then the primary killed and the replica promoted; then buyers press on (as a
/// sold-out crowd does) until MySQL holds every order a buyer was told of.
async fn sale_through_failover(mode: Replication, stock: u64) {
    const HEAL_WITHIN: Duration = Duration::from_secs(20);
    let redis = RedisServer::start(Persistence::None).await;
    let mut pair = MysqlPair::start(mode).await;
    let app = Arc::new(App::start_with(manifest(), pair.backend_env(redis.port())).await);
    let voucher = app.live_voucher(stock).await;
    let told = Arc::new(Mutex::new(Told::default()));
    let third = stock / 3;
    press(&app, voucher, 1..third + 1, &told).await;

    pair.lag().await;
    let lagging = {
        let (app, told) = (app.clone(), told.clone());
        tokio::spawn(async move { press(&app, voucher, third + 1..2 * third + 1, &told).await })
    };
    let mut lagging = Some(lagging);
    if mode == Replication::Async {
        lagging.take().unwrap().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    } else {
        // Their commits wait for the replica's acknowledgement until the primary dies.
        tokio::time::sleep(Duration::from_millis(800)).await;
    }
    let told_before = told.lock().unwrap().orders.clone();
    let killed = Instant::now();
    pair.fail_over().await;
    let lost_by_mysql = told_before.len() - mysql_sale(&pair, voucher).await.1.len();
    if mode == Replication::Async {
        assert!(
            lost_by_mysql > 0,
            "the failover lost nothing: the test shows nothing"
        );
    }

    if lost_by_mysql > 0 {
        assert_degraded_while_the_heal_is_held(&pair, &app, voucher, &told).await;
    }

    // Buyers press on, a round a few hundred milliseconds apart, the ones told nothing yet
    // and newcomers alike, until MySQL holds every order told of.
    let mut next_buyer = 2 * third + 1;
    let healed = loop {
        let (mysql_stock, orders) = mysql_sale(&pair, voucher).await;
        let told_orders = told.lock().unwrap().orders.clone();
        let all_held = told_orders
            .iter()
            .all(|(buyer, order)| orders.get(buyer) == Some(order));
        let health = app.get("/health", ADMIN_TOKEN).await;
        if all_held && health.body["status"] == "ok" && mysql_stock + orders.len() as u64 == stock {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < HEAL_WITHIN,
            "{mode:?}: not healed after {HEAL_WITHIN:?}: MySQL holds {} of {} orders told, stock {mysql_stock}, /health {}",
            told_orders.iter().filter(|(buyer, order)| orders.get(buyer) == Some(order)).count(),
            told_orders.len(),
            health.body
        );
        press(&app, voucher, next_buyer..next_buyer + 20, &told).await;
        next_buyer += 20;
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    if let Some(lagging) = lagging {
        lagging.await.unwrap();
    }

    // Every promise, once quiet: every order told is the buyer's in MySQL, stock + live
    // orders is the initial stock, and Redis agrees with MySQL.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mysql_stock, orders) = mysql_sale(&pair, voucher).await;
    let keys = Keys::new(BucketId::from_raw(voucher));
    let redis_stock: i64 = redis
        .conn()
        .await
        .hget(keys.voucher(), "stock")
        .await
        .unwrap();
    let told = std::mem::take(&mut *told.lock().unwrap());
    for (buyer, order) in &told.orders {
        assert_eq!(
            orders.get(buyer),
            Some(order),
            "{mode:?}: buyer {buyer}'s order"
        );
    }
    assert_eq!(
        mysql_stock + orders.len() as u64,
        stock,
        "{mode:?}: stock + live orders"
    );
    assert_eq!(
        redis_stock, mysql_stock as i64,
        "{mode:?}: Redis agrees with MySQL"
    );
    // What the product said of it: the orders committed again, on /metrics and in the
    // request log. `/health` says `degraded` from the audit that finds the loss until the
    // heal ends, which the same sweep runs at once (returns.rs holds a heal MySQL refuses).
    let metrics = app.get("/metrics", ADMIN_TOKEN).await;
    let restored = format!(
        "seckill_order_changes_total{{voucher_id=\"{voucher}\",outcome=\"restored\"}} {lost_by_mysql}"
    );
    assert!(
        metrics
            .body
            .as_str()
            .unwrap_or_default()
            .contains(&restored),
        "{mode:?}: no {restored} in {}",
        metrics.body
    );
    if lost_by_mysql > 0 {
        let log = app.request_log();
        assert!(
            log.contains(&format!(
                "MySQL lacked {lost_by_mysql} orders of voucher {voucher}"
            )),
            "{mode:?}: the heal is not in the request log:\n{log}"
        );
    }
    println!(
        "{mode:?} sale of {stock}: {} orders told before the failover, {lost_by_mysql} of them lost by MySQL and committed again; \
         every told order in MySQL and /health ok {:.1} s after the kill; {} presses, 5xx: {:?}",
        told_before.len(),
        healed.as_secs_f64(),
        told.presses,
        told.errors,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sale_through_an_async_failover_gets_back_every_order_mysql_lost() {
    sale_through_failover(Replication::Async, 45).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sale_through_a_semi_sync_failover_keeps_every_order_told() {
    sale_through_failover(Replication::SemiSync, 45).await;
}
