//! Faults during a sale: Redis killed and restarted (with and without persistence), MySQL
//! cut off, MySQL committing but its reply lost, MySQL slower than the reservation TTL,
//! a request dying between admission and MySQL, and the order-id sequence lost in a
//! Redis restart. Each scenario ends by checking the sale's promises: no oversell, one
//! order per buyer, MySQL stock + orders = initial stock, every 201 has its row, and,
//! once the fault is over, Redis agreeing with MySQL.
//!
//! The shared Redis (6379) and MariaDB are never touched: Redis faults use a private
//! `redis-server`, MySQL faults a proxy in front of MariaDB (`seckill_tests::proxy`).
//! The scenarios start and stop servers, so they run one at a time. Each prints its
//! request counts (`cargo test -p seckill-tests --test faults -- --nocapture`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use redis::AsyncCommands;
use reqwest::{Method, StatusCode};
use seckill_tests::app::{buyer_token, Answer, App, ADMIN_TOKEN};
use seckill_tests::backends::{fresh_voucher_id, key, mysql};
use seckill_tests::faults::{backend_env, Manifest, Persistence, RedisServer, Tally};
use seckill_tests::invariants;
use seckill_tests::proxy::Proxy;
use tokio::sync::Mutex;
use tokio::task::JoinSet;

/// The scenarios start, kill and reconfigure servers: one at a time.
static SERIAL: Mutex<()> = Mutex::const_new(());

const MARIADB: &str = "127.0.0.1:3306";
/// Order ids count seconds from here (src/order_id.rs).
const ID_EPOCH: i64 = 1_704_067_200;

/// The component with a private Redis and MySQL behind a proxy.
struct Rig {
    app: Arc<App>,
    redis: RedisServer,
    proxy: Proxy,
    _manifest: Manifest,
}

impl Rig {
    async fn start(persistence: Persistence, extra_env: &[(&str, &str)]) -> Rig {
        let redis = RedisServer::start(persistence).await;
        let proxy = Proxy::start(MARIADB.parse::<SocketAddr>().unwrap()).await;
        let manifest = Manifest::new(redis.port(), proxy.port());
        let mut env = backend_env(redis.port(), proxy.port());
        env.extend(
            extra_env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let app = Arc::new(App::start_with(manifest.path(), env).await);
        Rig {
            app,
            redis,
            proxy,
            _manifest: manifest,
        }
    }

    async fn sync(&self, voucher_id: u64) -> Answer {
        let path = format!("/vouchers/{voucher_id}/sync");
        self.app
            .call(Method::POST, &path, Some(ADMIN_TOKEN), None)
            .await
    }

    async fn pending(&self, voucher_id: u64) -> u64 {
        self.redis
            .conn()
            .await
            .zcard(key(voucher_id, "pending"))
            .await
            .unwrap()
    }

    async fn redis_stock(&self, voucher_id: u64) -> Option<i64> {
        self.redis
            .conn()
            .await
            .hget(key(voucher_id, "voucher"), "stock")
            .await
            .unwrap()
    }
}

/// Every user in `users` buys once, all at the same time; answers in `users` order.
async fn buy_all(
    app: &Arc<App>,
    voucher_id: u64,
    users: impl IntoIterator<Item = u64>,
) -> Vec<(u64, Answer)> {
    let mut set = JoinSet::new();
    for (i, user) in users.into_iter().enumerate() {
        let app = app.clone();
        set.spawn(async move { (i, user, app.buy(voucher_id, user).await) });
    }
    let mut answers: Vec<(usize, u64, Answer)> = set.join_all().await;
    answers.sort_by_key(|(i, _, _)| *i);
    answers.into_iter().map(|(_, u, a)| (u, a)).collect()
}

fn record_all(tally: &mut Tally, answers: &[(u64, Answer)]) {
    for (user, answer) in answers {
        tally.purchase(*user, answer);
    }
}

fn assert_all(answers: &[(u64, Answer)], status: u16, code: &str) {
    for (user, answer) in answers {
        assert_eq!(
            (answer.status.as_u16(), answer.error()),
            (status, code),
            "buyer {user}: {answer:?}"
        );
    }
}

/// Each buyer who bought before is now told `already_ordered`, with the same order id.
fn assert_shown_their_orders(again: &[(u64, Answer)], first: &[(u64, Answer)]) {
    for ((user, answer), (_, first)) in again.iter().zip(first) {
        assert_eq!(
            answer.error(),
            "already_ordered",
            "buyer {user}: {answer:?}"
        );
        assert_eq!(answer.order_id(), first.order_id(), "buyer {user}");
    }
}

/// Waits until `n` reservations are in flight (admitted, not yet settled).
async fn until_pending(rig: &Rig, voucher_id: u64, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while rig.pending(voucher_id).await < n {
        assert!(Instant::now() < deadline, "{n} reservations never pending");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Redis dies mid-sale with five purchases inside MySQL, comes back, and the sale goes
/// on: without persistence only after an admin sync, with an fsynced AOF at once.
async fn redis_restart(persistence: Persistence) -> Tally {
    let mut rig = Rig::start(persistence, &[("SPIN_VARIABLE_RESERVATION_TTL_MS", "1000")]).await;
    let voucher = rig.app.live_voucher(20).await;
    let mut tally = Tally::default();

    // Before the fault: five orders.
    let before = buy_all(&rig.app, voucher, 1..=5).await;
    assert_all(&before, 201, "");
    record_all(&mut tally, &before);

    // Five more are admitted and held inside MySQL (slowed by the proxy) when Redis dies:
    // they commit, and their answers stand although Redis cannot record them.
    rig.proxy.set_latency(Duration::from_millis(400));
    let in_flight = {
        let app = rig.app.clone();
        tokio::spawn(async move { buy_all(&app, voucher, 6..=10).await })
    };
    until_pending(&rig, voucher, 5).await;
    rig.redis.kill().await;
    let in_flight = in_flight.await.unwrap();
    assert_all(&in_flight, 201, "");
    record_all(&mut tally, &in_flight);
    rig.proxy.set_latency(Duration::ZERO);

    // The gap: clean 503s, nothing else; MySQL still answers reads.
    let gap = buy_all(&rig.app, voucher, 11..=30).await;
    assert_all(&gap, 503, "unavailable");
    record_all(&mut tally, &gap);
    let sync = rig.sync(voucher).await;
    assert_eq!((sync.status.as_u16(), sync.error()), (503, "unavailable"));
    let view = rig
        .app
        .call(Method::GET, &format!("/vouchers/{voucher}"), None, None)
        .await;
    assert_eq!(view.status, StatusCode::OK);
    assert_eq!(view.body["remaining"], 10);
    let sound = invariants::read(voucher).await;
    sound.assert_sound(&tally.acknowledged);

    rig.redis.restart().await;
    match persistence {
        Persistence::None => {
            // Everything is gone, scripts included: purchases wait for the sync.
            assert_eq!(rig.redis_stock(voucher).await, None);
            let lost = buy_all(&rig.app, voucher, 11..=15).await;
            for (user, answer) in &lost {
                assert_eq!(answer.status.as_u16(), 503, "buyer {user}: {answer:?}");
                assert_eq!(
                    answer.body["message"],
                    "service temporarily unavailable: sale state not loaded"
                );
            }
            record_all(&mut tally, &lost);
            let sync = rig.sync(voucher).await;
            assert_eq!(sync.status, StatusCode::OK, "{sync:?}");
            assert_eq!(sync.body["remaining"], 10);
        }
        Persistence::AofAlways => {
            // Redis kept everything it acknowledged: the five in flight are still
            // reserved (their settlement never reached Redis), stock says 10.
            assert_eq!(rig.redis_stock(voucher).await, Some(10));
            assert_eq!(rig.pending(voucher).await, 5);
            // Their buyers' next attempts, once the locks expire, find their orders.
            tokio::time::sleep(Duration::from_millis(1100)).await;
            let again = buy_all(&rig.app, voucher, 6..=10).await;
            assert_shown_their_orders(&again, &in_flight);
            record_all(&mut tally, &again);
            let record = rig.redis.sale(voucher).await;
            record.assert_sound(&tally.acknowledged);
            record.assert_redis_agrees();
        }
    }

    // The sale continues to the end: the first buyers still have their orders, and the
    // ten units left go to ten of the next twenty buyers.
    let repeat = buy_all(&rig.app, voucher, 1..=5).await;
    assert_shown_their_orders(&repeat, &before);
    record_all(&mut tally, &repeat);
    let rest = buy_all(&rig.app, voucher, 11..=30).await;
    record_all(&mut tally, &rest);
    let sold: Vec<_> = rest.iter().filter(|(_, a)| a.status == 201).collect();
    assert_eq!(sold.len(), 10, "{rest:?}");
    assert_eq!(
        rest.iter().filter(|(_, a)| a.error() == "sold_out").count(),
        10
    );

    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&tally.acknowledged);
    assert_eq!(record.orders.len(), 20);
    record.assert_redis_agrees();
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_without_persistence_needs_a_sync_then_the_sale_goes_on() {
    let _serial = SERIAL.lock().await;
    let tally = redis_restart(Persistence::None).await;
    println!("faults: redis restart, no persistence: {tally}");
    assert_eq!(tally.of(201, ""), 20);
    assert_eq!(tally.of(503, "unavailable"), 20 + 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_with_aof_keeps_the_sale_going() {
    let _serial = SERIAL.lock().await;
    let tally = redis_restart(Persistence::AofAlways).await;
    println!("faults: redis restart, AOF always: {tally}");
    assert_eq!(tally.of(201, ""), 20);
    assert_eq!(tally.of(503, "unavailable"), 20);
}

/// The purchase ended in a clean 503 and was undone at once: the unit is back, and the
/// buyer has no reservation and no lock.
async fn assert_undone(rig: &Rig, voucher: u64, user: u64, answer: &Answer) {
    assert_eq!(
        (answer.status.as_u16(), answer.error()),
        (503, "unavailable"),
        "buyer {user}: {answer:?}"
    );
    assert_eq!(rig.redis_stock(voucher).await, Some(2));
    assert_eq!(rig.pending(voucher).await, 0);
    // Unsettled: had the purchase committed unseen, her next attempt would learn it.
    assert_eq!(
        rig.redis.buyer_record(voucher, user).await.as_deref(),
        Some("u")
    );
    let lock: bool = rig
        .redis
        .conn()
        .await
        .exists(key(voucher, &format!("lock:{user}")))
        .await
        .unwrap();
    assert!(!lock, "buyer {user}'s lock is left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_cut_off_undoes_the_reservation_and_the_buyer_retries() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(Persistence::None, &[]).await;
    let voucher = rig.app.live_voucher(3).await;
    let mut tally = Tally::default();

    let first = rig.app.buy(voucher, 1).await;
    tally.purchase(1, &first);
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");

    // Cut while a purchase is on its way to MySQL (its connection is held in the slowed
    // proxy), then refuse every new connection.
    rig.proxy.set_latency(Duration::from_millis(300));
    let stats = rig.proxy.stats();
    let forwarded = stats.forwarded.load(std::sync::atomic::Ordering::SeqCst);
    let severed = {
        let app = rig.app.clone();
        tokio::spawn(async move { app.buy(voucher, 2).await })
    };
    until_pending(&rig, voucher, 1).await;
    // Cut only once the purchase's connection is inside the proxy, so it is severed
    // rather than refused.
    let deadline = Instant::now() + Duration::from_secs(5);
    while stats.forwarded.load(std::sync::atomic::Ordering::SeqCst) == forwarded {
        assert!(
            Instant::now() < deadline,
            "the purchase never reached MySQL"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    rig.proxy.cut();
    let severed = severed.await.unwrap();
    rig.proxy.set_latency(Duration::ZERO);
    tally.purchase(2, &severed);
    assert_undone(&rig, voucher, 2, &severed).await;
    for user in 3..=6 {
        let answer = rig.app.buy(voucher, user).await;
        tally.purchase(user, &answer);
        assert_undone(&rig, voucher, user, &answer).await;
    }
    let health = rig.app.call(Method::GET, "/health", None, None).await;
    assert_eq!(health.status.as_u16(), 503);
    assert_eq!(health.body["mysql"], "down");
    assert_eq!(health.body["redis"], "ok");
    assert!(stats.severed.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    assert!(stats.refused.load(std::sync::atomic::Ordering::SeqCst) >= 4);

    // Back: the same buyers buy at once (no lock left behind to wait out).
    rig.proxy.restore();
    let retried = buy_all(&rig.app, voucher, 2..=6).await;
    record_all(&mut tally, &retried);
    let sold = retried.iter().filter(|(_, a)| a.status == 201).count();
    let sold_out = retried
        .iter()
        .filter(|(_, a)| a.error() == "sold_out")
        .count();
    assert_eq!((sold, sold_out), (2, 3), "{retried:?}");

    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&tally.acknowledged);
    assert_eq!(record.orders.len(), 3);
    record.assert_redis_agrees();
    println!("faults: mysql cut off: {tally}");
    assert_eq!(tally.total(), 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_commits_but_the_reply_is_lost() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(Persistence::None, &[]).await;
    let voucher = rig.app.live_voucher(3).await;
    let mut tally = Tally::default();

    rig.proxy.lose_statement_replies(1);
    let lost = rig.app.buy(voucher, 1).await;
    tally.purchase(1, &lost);
    assert_eq!(
        (lost.status.as_u16(), lost.error()),
        (503, "unavailable"),
        "{lost:?}"
    );
    let stats = rig.proxy.stats();
    assert_eq!(
        stats.replies_lost.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    // MySQL did commit it.
    let record = rig.redis.sale(voucher).await;
    let committed: Vec<_> = record.orders.iter().filter(|(_, u)| **u == 1).collect();
    assert_eq!(committed.len(), 1, "{record:?}");
    let committed = *committed[0].0;

    // The buyer retries and is shown the order that did go through.
    let retry = rig.app.buy(voucher, 1).await;
    tally.purchase(1, &retry);
    assert_eq!(retry.error(), "already_ordered", "{retry:?}");
    assert_eq!(retry.order_id(), Some(committed));
    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&tally.acknowledged);
    record.assert_redis_agrees();

    // And the two units left sell to two of the next four buyers.
    let rest = buy_all(&rig.app, voucher, 2..=5).await;
    record_all(&mut tally, &rest);
    assert_eq!(rest.iter().filter(|(_, a)| a.status == 201).count(), 2);
    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&tally.acknowledged);
    assert_eq!(record.orders.len(), 3);
    record.assert_redis_agrees();
    println!("faults: mysql reply lost after commit: {tally}");
}

/// How a buyer who keeps trying fared.
struct Attempts {
    user: u64,
    answers: Vec<Answer>,
}

/// `user` tries every `every` until `until`, stopping at a 201 or `already_ordered`.
async fn keep_buying(
    app: Arc<App>,
    voucher: u64,
    user: u64,
    every: Duration,
    until: Instant,
) -> Attempts {
    let mut answers = Vec::new();
    let mut tasks = JoinSet::new();
    while Instant::now() < until {
        let app = app.clone();
        tasks.spawn(async move { app.buy(voucher, user).await });
        tokio::time::sleep(every).await;
        while let Some(done) = tasks.try_join_next() {
            answers.push(done.unwrap());
        }
        if answers
            .iter()
            .any(|a| a.status == 201 || a.error() == "already_ordered")
        {
            break;
        }
    }
    answers.extend(tasks.join_all().await);
    Attempts { user, answers }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_slower_than_the_reservation_ttl() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(
        Persistence::None,
        &[("SPIN_VARIABLE_RESERVATION_TTL_MS", "300")],
    )
    .await;
    let voucher = rig.app.live_voucher(3).await;
    rig.proxy.set_latency(Duration::from_millis(800));
    let started = Instant::now();
    let until = started + Duration::from_secs(4);

    // Buyer 1 is admitted first and its purchase sits in MySQL well past its lock; it
    // keeps firing every 100 ms, and buyers 2..=7 every 250 ms for the last two units.
    let mut buyers = JoinSet::new();
    buyers.spawn(keep_buying(
        rig.app.clone(),
        voucher,
        1,
        Duration::from_millis(100),
        until,
    ));
    until_pending(&rig, voucher, 1).await;
    for user in 2..=7 {
        buyers.spawn(keep_buying(
            rig.app.clone(),
            voucher,
            user,
            Duration::from_millis(250),
            until,
        ));
    }
    let buyers = buyers.join_all().await;
    rig.proxy.set_latency(Duration::ZERO);

    let mut tally = Tally::default();
    for attempts in &buyers {
        let created = attempts.answers.iter().filter(|a| a.status == 201).count();
        assert!(created <= 1, "buyer {} got {created} orders", attempts.user);
        for answer in &attempts.answers {
            tally.purchase(attempts.user, answer);
            assert!(
                matches!(
                    (answer.status.as_u16(), answer.error()),
                    (201, "") | (409, "already_ordered") | (409, "sold_out") | (429, "busy")
                ),
                "buyer {}: {answer:?}",
                attempts.user
            );
        }
    }
    let first = &buyers.iter().find(|b| b.user == 1).unwrap().answers;
    assert_eq!(
        first.iter().filter(|a| a.status == 201).count(),
        1,
        "buyer 1: {first:?}"
    );
    assert!(
        tally.of(429, "busy") > 0,
        "the lock never turned buyer 1 away"
    );

    // Everything has settled: no reservation left, every unit sold exactly once, and
    // Redis agrees with MySQL.
    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&tally.acknowledged);
    assert_eq!(record.orders.len(), 3, "a unit was lost: {record:?}");
    assert_eq!(tally.acknowledged.len(), 3);
    record.assert_redis_agrees();
    println!(
        "faults: mysql slower than the TTL (300 ms TTL, 800 ms latency each way): {tally}; {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Polls `user` every 20 ms until the purchase is not `reject`; returns the answer and
/// the time since `since`.
async fn poll_until_not(
    since: Instant,
    app: &App,
    voucher: u64,
    user: u64,
    reject: &str,
    tally: &mut Tally,
) -> (Answer, Duration) {
    loop {
        let answer = app.buy(voucher, user).await;
        tally.purchase(user, &answer);
        if answer.error() != reject {
            return (answer, since.elapsed());
        }
        assert!(since.elapsed() < Duration::from_secs(5), "{answer:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `user`'s purchase dies between Redis admission and MySQL: once admitted it waits in
/// the MySQL proxy (held there by a long latency) and Spin is killed (SIGKILL) under it,
/// so the client gets no answer. Spin is then started again on the same address.
/// Returns when the request died.
async fn die_after_admission(rig: &Rig, voucher: u64, user: u64) -> Instant {
    rig.proxy.set_latency(Duration::from_secs(30));
    let app = rig.app.clone();
    let path = format!("/vouchers/{voucher}/orders");
    let purchase = tokio::spawn(async move {
        app.try_call(Method::POST, &path, Some(&buyer_token(user)), None)
            .await
    });
    until_pending(rig, voucher, 1).await;
    rig.app.crash();
    let died_at = Instant::now();
    let answer = purchase.await.unwrap();
    assert!(answer.is_err(), "a killed Spin answered: {answer:?}");
    rig.proxy.set_latency(Duration::ZERO);
    rig.app.restart();
    died_at
}

/// The unit came back no earlier than the TTL after the request died (less the time the
/// dead request took after admission) and no later than the TTL plus a poll and a
/// request (measured: 30 to 50 ms; 500 ms allowed for a loaded CI machine).
fn assert_back_within_the_ttl(took: Duration, ttl: Duration) {
    assert!(
        took >= ttl - Duration::from_millis(100),
        "back after {took:?}"
    );
    assert!(
        took <= ttl + Duration::from_millis(500),
        "back after {took:?}"
    );
}

/// A request that dies between Redis admission and MySQL (Spin killed while the request
/// waits for MySQL). Its reservation holds the unit for `reservation_ttl_ms`, then the
/// unit is back: the buyer's next attempt takes it over, or, at stock 0, another buyer
/// reclaims it. Measured here: the unit is back after the TTL and within it plus one
/// 20 ms poll (a bound of `reservation_ttl_ms` from the moment of admission).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dying_between_admission_and_mysql_holds_the_unit_for_the_ttl() {
    const TTL_MS: u64 = 1000;
    let _serial = SERIAL.lock().await;
    let ttl_ms = TTL_MS.to_string();
    let rig = Rig::start(
        Persistence::None,
        &[("SPIN_VARIABLE_RESERVATION_TTL_MS", &ttl_ms)],
    )
    .await;
    let app = rig.app.clone();
    let ttl = Duration::from_millis(TTL_MS);
    let mut tally = Tally::default();
    let mut last_unit = Tally::default();

    // The same buyer: busy while the lock lives, then the attempt takes the unit over.
    let voucher = app.live_voucher(2).await;
    let died_at = die_after_admission(&rig, voucher, 1).await;
    tally.died();
    let busy = app.buy(voucher, 1).await;
    tally.purchase(1, &busy);
    assert_eq!(busy.error(), "busy", "{busy:?}");
    assert_eq!(busy.headers["retry-after"], "1");
    let (answer, took) = poll_until_not(died_at, &app, voucher, 1, "busy", &mut tally).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
    let own_bound = took;
    assert_back_within_the_ttl(took, ttl);
    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&tally.acknowledged);
    assert_eq!(record.orders.len(), 1);
    record.assert_redis_agrees();

    // The last unit: another buyer gets sold_out until the reservation expires, then
    // reclaims it.
    let voucher = app.live_voucher(1).await;
    let died_at = die_after_admission(&rig, voucher, 10).await;
    last_unit.died();
    let (answer, took) =
        poll_until_not(died_at, &app, voucher, 11, "sold_out", &mut last_unit).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
    assert_back_within_the_ttl(took, ttl);
    // The buyer whose request died has no order and no unit now.
    let late = app.buy(voucher, 10).await;
    last_unit.purchase(10, &late);
    assert_eq!(late.error(), "sold_out", "{late:?}");
    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&last_unit.acknowledged);
    assert_eq!(record.orders.values().copied().collect::<Vec<_>>(), [11]);
    record.assert_redis_agrees();
    println!(
        "faults: request dies after admission (TTL {TTL_MS} ms): same buyer {tally}; last unit {last_unit}; unit back {:.0} ms (same buyer) and {:.0} ms (another buyer) after Spin was killed",
        own_bound.as_secs_f64() * 1000.0,
        took.as_secs_f64() * 1000.0
    );
}

/// Order ids are `seconds << 32 | sequence`, the sequence from a per-day Redis key. A
/// Redis restart without persistence loses the key; the admission script seeds a lost
/// day key from the time of day (8 per millisecond, `lua/admission.lua`), so the
/// restarted sequence starts above every number handed out earlier that day unless more
/// than 8 orders per millisecond were taken since midnight. Should an id collide all the
/// same, the primary key of `tb_voucher_order` refuses it and the purchase ends in a
/// clean 503 with its reservation undone (`id_taken` in `seckill_purchase`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_ids_stay_unique_across_a_redis_restart() {
    let _serial = SERIAL.lock().await;
    let mut rig = Rig::start(Persistence::None, &[]).await;
    let voucher = rig.app.live_voucher(40).await;
    let mut tally = Tally::default();

    let before = buy_all(&rig.app, voucher, 1..=10).await;
    assert_all(&before, 201, "");
    record_all(&mut tally, &before);
    rig.redis.kill().await;
    rig.redis.restart().await;
    let sync = rig.sync(voucher).await;
    assert_eq!(sync.status, StatusCode::OK, "{sync:?}");
    let after = buy_all(&rig.app, voucher, 11..=20).await;
    assert_all(&after, 201, "");
    record_all(&mut tally, &after);

    let ids: Vec<u64> = tally.acknowledged.iter().map(|(id, _)| *id).collect();
    let distinct: std::collections::HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), 20, "{ids:?}");
    let seconds = |id: &u64| id >> 32;
    let first_seconds: std::collections::HashSet<u64> = ids[..10].iter().map(seconds).collect();
    let same_second = ids[10..]
        .iter()
        .filter(|id| first_seconds.contains(&seconds(id)))
        .count();
    let restarted_min = ids[10..].iter().map(|id| id & 0xffff_ffff).min().unwrap();
    let before_max = ids[..10].iter().map(|id| id & 0xffff_ffff).max().unwrap();
    assert!(
        restarted_min > before_max,
        "the restarted sequence ({restarted_min}) does not start above the earlier one ({before_max})"
    );

    // A collision all the same: make the next id one that MySQL already holds.
    let mut conn = rig.redis.conn().await;
    let (now, _): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let sequence_key = format!("seckill:order-seq:{}", now / 86_400);
    let next = (1u64 << 32) - 1000;
    let _: () = conn.set(&sequence_key, next - 1).await.unwrap();
    let squatter_voucher = fresh_voucher_id();
    let pool = mysql();
    let mut db = pool.get_conn().await.unwrap();
    let taken: Vec<(u64, u64, u64)> = (now - 2..=now + 5)
        .enumerate()
        .map(|(i, s)| {
            (
                (((s - ID_EPOCH) as u64) << 32) | next,
                1_000_000 + i as u64,
                squatter_voucher,
            )
        })
        .collect();
    db.exec_batch(
        "INSERT INTO tb_voucher_order (id, user_id, voucher_id, status, create_time) VALUES (?, ?, ?, 1, UTC_TIMESTAMP())",
        taken.iter().copied(),
    )
    .await
    .unwrap();
    let collided = rig.app.buy(voucher, 21).await;
    tally.purchase(21, &collided);
    let retried = rig.app.buy(voucher, 21).await;
    tally.purchase(21, &retried);
    db.exec_drop(
        "DELETE FROM tb_voucher_order WHERE voucher_id = ?",
        (squatter_voucher,),
    )
    .await
    .unwrap();
    drop(db);
    pool.disconnect().await.unwrap();
    assert_eq!(
        (collided.status.as_u16(), collided.error()),
        (503, "unavailable"),
        "{collided:?}"
    );
    assert_eq!(
        collided.body["message"],
        "service temporarily unavailable: order id collision; retry"
    );
    assert_eq!(retried.status, StatusCode::CREATED, "{retried:?}");
    assert_eq!(retried.order_id().unwrap() & 0xffff_ffff, next + 1);

    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&tally.acknowledged);
    assert_eq!(record.orders.len(), 21);
    record.assert_redis_agrees();
    println!(
        "faults: order ids across a Redis restart: {tally}; {same_second} of the 10 later ids share a second with an earlier one, all 21 distinct"
    );
}

/// An admission whose reply the component cannot use (here: an order sequence past 32
/// bits, so the id does not fit) after the script reserved: the 503 must undo the
/// reservation, so the buyer is not left `busy` for the TTL nor the unit held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_admission_reply_is_undone() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(Persistence::None, &[]).await;
    let voucher = rig.app.live_voucher(3).await;
    let mut conn = rig.redis.conn().await;
    let (now, _): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let sequence_key = format!("seckill:order-seq:{}", now / 86_400);
    let _: () = conn.set(&sequence_key, 1u64 << 32).await.unwrap();

    let unusable = rig.app.buy(voucher, 1).await;
    assert_eq!(
        (unusable.status.as_u16(), unusable.error()),
        (503, "unavailable"),
        "{unusable:?}"
    );
    assert_eq!(rig.redis_stock(voucher).await, Some(3));
    assert_eq!(rig.pending(voucher).await, 0);
    let lock: bool = conn.exists(key(voucher, "lock:1")).await.unwrap();
    assert!(!lock, "the buyer's lock is left");

    // The sequence is sane again: the same buyer buys at once, not `busy`.
    let _: () = conn.del(&sequence_key).await.unwrap();
    let again = rig.app.buy(voucher, 1).await;
    assert_eq!(again.status, StatusCode::CREATED, "{again:?}");
    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&[(again.order_id().unwrap(), 1)]);
    record.assert_redis_agrees();
}
