//! Faults during a sale: Redis killed and restarted (with and without persistence), MySQL
//! cut off, MySQL committing but its reply lost, MySQL slower than the drainer's lease, a
//! request dying after admission while its group commit waits in MySQL, the order-id
//! sequence lost in a Redis restart, and the day's sequence used up. Each scenario ends
//! by checking the sale's promises: no oversell, one order per buyer, MySQL stock +
//! orders = initial stock, every 201 has its row, and, once the fault is over, Redis
//! agreeing with MySQL with nothing left queued.
//!
//! The shared Redis (6379) and MariaDB are never touched but for the test's own rows:
//! Redis faults use a private `redis-server`, MySQL faults a proxy in front of MariaDB
//! (`seckill_tests::servers::proxy`), and a group commit is held inside MySQL by a transaction of
//! the test's that locks the voucher's stock row ([`RowLock`]). The scenarios start and
//! stop servers, so they run one at a time. Each prints its request counts
//! (`cargo test --workspace --test suite -- spin::faults:: --nocapture`).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use redis::AsyncCommands;
use reqwest::{Method, StatusCode};
use seckill_core::sale::{Keys, Record, LEASE_MS};
use seckill_core::{BucketId, OrderId, UserId};
use seckill_tests::drivers::app::{buyer_token, p3, Answer, App, ADMIN_TOKEN};
use seckill_tests::drivers::invariants;
use seckill_tests::drivers::scripts::{self, RowLock, Sale};
use seckill_tests::servers::faults::{backend_env, Manifest, Persistence, RedisServer, Tally};
use seckill_tests::servers::local::{fresh_voucher_id, mysql_exec};
use seckill_tests::servers::proxy::Proxy;
use tokio::sync::Mutex;
use tokio::task::{JoinHandle, JoinSet};

/// The scenarios start, kill and reconfigure servers: one at a time.
static SERIAL: Mutex<()> = Mutex::const_new(());

/// Runs a scenario that counts what buyers heard, alone ([`SERIAL`]), and prints its
/// tally as `what`.
async fn serially(what: &str, scenario: impl std::future::Future<Output = Tally>) -> Tally {
    let _serial = SERIAL.lock().await;
    let tally = scenario.await;
    println!("faults: {what}: {tally}");
    tally
}

const MARIADB: &str = "127.0.0.1:3306";

/// The component with a private Redis and MySQL behind a proxy.
struct Rig {
    app: Arc<App>,
    redis: RedisServer,
    proxy: Proxy,
    _manifest: Manifest,
}

impl Rig {
    async fn start(persistence: Persistence) -> Rig {
        let redis = RedisServer::start(persistence).await;
        let proxy = Proxy::start(MARIADB.parse::<SocketAddr>().unwrap()).await;
        let manifest = Manifest::with_absolute_paths();
        let env = backend_env(redis.port(), proxy.port());
        let app = Arc::new(App::start_with(manifest.path(), env).await);
        Rig {
            app,
            redis,
            proxy,
            _manifest: manifest,
        }
    }

    /// The component served again, by a Spin of its own, with `redis` in the place of
    /// the Redis it had.
    async fn fail_over_to(&mut self, redis: RedisServer) {
        let manifest = Manifest::with_absolute_paths();
        let env = backend_env(redis.port(), self.proxy.port());
        self.app = Arc::new(App::start_with(manifest.path(), env).await);
        self.redis = redis;
        self._manifest = manifest;
    }

    async fn sync(&self, voucher_id: u64) -> Answer {
        let path = format!("/vouchers/{voucher_id}/sync");
        self.app.post(&path, ADMIN_TOKEN).await
    }

    /// The voucher's sale state in the private Redis, through the component's scripts.
    async fn sale(&self, voucher_id: u64) -> Sale {
        Sale {
            conn: self.redis.conn().await,
            voucher: BucketId::from_raw(voucher_id),
        }
    }

    async fn queued(&self, voucher_id: u64) -> u64 {
        self.redis
            .conn()
            .await
            .llen(keys(voucher_id).queue())
            .await
            .unwrap()
    }

    async fn redis_stock(&self, voucher_id: u64) -> Option<i64> {
        self.redis
            .conn()
            .await
            .hget(keys(voucher_id).voucher(), "stock")
            .await
            .unwrap()
    }

    /// Waits until the proxy has passed `n` statements to MySQL in all. A group commit
    /// is one statement (`CALL seckill_commit_batch`): the driver's own queries at
    /// connect are not counted.
    async fn until_statements(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.mysql_counters().2 < n {
            assert!(Instant::now() < deadline, "no group commit reached MySQL");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// (connections forwarded, connections refused, statements) so far.
    fn mysql_counters(&self) -> (u64, u64, u64) {
        let stats = self.proxy.stats();
        (
            stats.forwarded.load(Ordering::SeqCst),
            stats.refused.load(Ordering::SeqCst),
            stats.statements.load(Ordering::SeqCst),
        )
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

/// Every user in `users` buys once, one after the other; answers in `users` order.
async fn buy_each(
    app: &App,
    voucher_id: u64,
    users: impl IntoIterator<Item = u64>,
) -> Vec<(u64, Answer)> {
    let mut answers = Vec::new();
    for user in users {
        answers.push((user, app.buy(voucher_id, user).await));
    }
    answers
}

fn record_all(tally: &mut Tally, answers: &[(u64, Answer)]) {
    for (user, answer) in answers {
        tally.purchase(*user, answer);
    }
}

fn assert_all(answers: &[(u64, Answer)], status: u16, code: &str) {
    for (user, answer) in answers {
        assert_is(answer, status, code, *user);
    }
}

fn assert_is(answer: &Answer, status: u16, code: &str, user: u64) {
    assert_eq!(
        (answer.status.as_u16(), answer.error()),
        (status, code),
        "buyer {user}: {answer:?}"
    );
}

/// `answer` is `user`'s 201 or `already_ordered` for `order`.
fn assert_names(answer: &Answer, status: u16, order: u64, user: u64) {
    let code = if status == 201 { "" } else { "already_ordered" };
    assert_is(answer, status, code, user);
    assert_eq!(answer.order_id(), Some(order), "buyer {user}: {answer:?}");
}

/// Each buyer who bought before is now told `already_ordered`, with the same order id.
fn assert_shown_their_orders(again: &[(u64, Answer)], first: &[(u64, Answer)]) {
    for ((user, answer), (_, first)) in again.iter().zip(first) {
        assert_names(answer, 409, first.order_id().unwrap(), *user);
    }
}

/// The keys of the voucher's sale state in Redis.
fn keys(voucher_id: u64) -> Keys {
    Keys::new(BucketId::from_raw(voucher_id))
}

/// Waits until `n` purchases of the voucher are queued (admitted, not yet published).
async fn until_queued(rig: &Rig, voucher_id: u64, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while rig.queued(voucher_id).await < n {
        assert!(Instant::now() < deadline, "{n} purchases never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The queue as (user, order id) of each purchase, oldest first.
async fn queued_orders(sale: &Sale) -> Vec<(u64, u64)> {
    sale.queue()
        .await
        .iter()
        .map(|entry| {
            let order_id = entry.ticket.order_id().expect("a ticket");
            (entry.user.raw(), order_id.raw())
        })
        .collect()
}

/// Redis dies mid-sale while a group commit waits inside MySQL and four more purchases
/// are queued behind it; it comes back, and the sale goes on: without persistence only
/// after an admin sync, with an fsynced AOF at once. Bound: each of the five buyers ends
/// with exactly one order (the committed one hears 201 from its drainer, which answers
/// from MySQL's verdict although it cannot publish it, and is shown it again; the others
/// are sold anew or, with the AOF, committed from the queue Redis kept) after one more
/// press each, and the sale sells exactly its 20 units.
async fn redis_restart(persistence: Persistence) -> Tally {
    let mut rig = Rig::start(persistence).await;
    let voucher = rig.app.live_voucher(20).await;
    let mut tally = Tally::default();

    // Before the fault: five orders.
    let before = buy_all(&rig.app, voucher, 1..=5).await;
    assert_all(&before, 201, "");
    record_all(&mut tally, &before);

    // Five more are admitted: the first one's group commit waits inside MySQL, the other
    // four queue behind it. Redis dies; then MySQL lets the commit through, and nobody
    // can publish it.
    let lock = RowLock::hold(BucketId::from_raw(voucher)).await;
    let (.., statements) = rig.mysql_counters();
    let in_flight = {
        let app = rig.app.clone();
        tokio::spawn(async move { buy_all(&app, voucher, 6..=10).await })
    };
    until_queued(&rig, voucher, 5).await;
    rig.until_statements(statements + 1).await;
    let queued = queued_orders(&rig.sale(voucher).await).await;
    rig.redis.kill().await;
    lock.release().await;
    let in_flight = in_flight.await.unwrap();
    record_all(&mut tally, &in_flight);
    // The head of the queue was the one committed: its drainer hears MySQL's verdict;
    // the waiters lose theirs with Redis.
    let (committed_user, committed_order) = queued[0];
    for (user, answer) in &in_flight {
        if *user == committed_user {
            assert_names(answer, 201, committed_order, *user);
        } else {
            assert_is(answer, 503, "unavailable", *user);
        }
    }
    let record = invariants::read(voucher).await;
    assert_eq!(record.orders.len(), 6, "{record:?}");
    assert_eq!(record.orders.get(&committed_order), Some(&committed_user));

    // The gap: clean 503s, nothing else.
    let gap = buy_all(&rig.app, voucher, 11..=30).await;
    assert_all(&gap, 503, "unavailable");
    record_all(&mut tally, &gap);
    let sync = rig.sync(voucher).await;
    assert_eq!((sync.status.as_u16(), sync.error()), (503, "unavailable"));
    // Reads wait for Redis too: nothing would bound what they cost MySQL.
    let view = rig
        .app
        .call(Method::GET, &format!("/vouchers/{voucher}"), None, None)
        .await;
    assert_eq!((view.status.as_u16(), view.error()), (503, "unavailable"));
    invariants::read(voucher)
        .await
        .assert_sound(&tally.acknowledged);

    rig.redis.restart().await;
    match persistence {
        Persistence::None => {
            // Everything is gone, scripts included: purchases wait for the sync.
            assert_eq!(rig.redis_stock(voucher).await, None);
            let lost = buy_all(&rig.app, voucher, 11..=15).await;
            for (user, answer) in &lost {
                assert_is(answer, 503, "unavailable", *user);
                assert_eq!(
                    answer.body["message"],
                    "service temporarily unavailable: sale state not loaded"
                );
            }
            record_all(&mut tally, &lost);
            let sync = rig.sync(voucher).await;
            assert_eq!(sync.status, StatusCode::OK, "{sync:?}");
            assert_eq!(sync.body["remaining"], 14);
            // The buyer whose purchase was committed is shown it; the other four lost
            // theirs with Redis and buy anew.
            let again = buy_each(&rig.app, voucher, 6..=10).await;
            record_all(&mut tally, &again);
            for (user, answer) in &again {
                if *user == committed_user {
                    assert_names(answer, 409, committed_order, *user);
                } else {
                    assert_is(answer, 201, "", *user);
                }
            }
        }
        // The process died, not the machine: everysec lost nothing either.
        Persistence::AofAlways | Persistence::AofEverysec => {
            // Redis kept everything it acknowledged: the five purchases are still
            // queued, and stock says 10.
            assert_eq!(rig.redis_stock(voucher).await, Some(10));
            let sale = rig.sale(voucher).await;
            assert_eq!(queued_orders(&sale).await, queued);
            // The drainer's lease lapses (deleted, as its TTL would). The first buyer to
            // press again drains the queue and hears her order as already made; the others
            // are then shown theirs. The order committed before Redis died is committed once.
            sale.expire_lease().await;
            let again = buy_each(&rig.app, voucher, 6..=10).await;
            record_all(&mut tally, &again);
            for (user, answer) in &again {
                let (_, order) = *queued.iter().find(|(u, _)| u == user).unwrap();
                assert_names(answer, 409, order, *user);
            }
            let record = rig.redis.sale(voucher).await;
            record.assert_settled(&tally.acknowledged);
            assert_eq!(record.orders.len(), 10);
        }
    }

    // The sale continues to the end: the first buyers still have their orders, and the
    // ten units left go to ten of the next twenty buyers.
    let repeat = buy_all(&rig.app, voucher, 1..=5).await;
    assert_shown_their_orders(&repeat, &before);
    record_all(&mut tally, &repeat);
    let rest = buy_all(&rig.app, voucher, 11..=30).await;
    record_all(&mut tally, &rest);
    let sold = rest.iter().filter(|(_, a)| a.status == 201).count();
    assert_eq!(sold, 10, "{rest:?}");
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

/// [`redis_restart`] without persistence. Counted: 4 + 20 + 5 clean 503s (the four
/// waiters in flight, the gap, the sale before the sync), and nothing else but 201 and
/// 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_without_persistence_needs_a_sync_then_the_sale_goes_on() {
    let tally = serially(
        "redis restart, no persistence",
        redis_restart(Persistence::None),
    )
    .await;
    assert_eq!(tally.of(201, ""), 5 + 1 + 4 + 10);
    assert_eq!(tally.of(503, "unavailable"), 4 + 20 + 5);
    assert_eq!(tally.of(409, "already_ordered"), 1 + 5);
}

/// [`redis_restart`] with an fsynced AOF. Counted: 4 + 20 clean 503s (the four waiters
/// in flight, the gap), and nothing else but 201 and 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_with_aof_keeps_the_sale_going() {
    let tally = serially(
        "redis restart, AOF always",
        redis_restart(Persistence::AofAlways),
    )
    .await;
    assert_eq!(tally.of(201, ""), 5 + 1 + 10);
    assert_eq!(tally.of(503, "unavailable"), 4 + 20);
    assert_eq!(tally.of(409, "already_ordered"), 5 + 5);
}

/// Redis restarted between requests, nothing in flight and the sale's state on disk. The
/// WASIp3 build's instances still hold connections that died meanwhile (each instance's
/// own, and those it keeps for its waiters); the first command each sends on one goes
/// again on a new connection. Bound: in either build, no press after the restart meets
/// a `503`, and the buyers from before are still known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_between_requests_costs_no_answer() {
    let _serial = SERIAL.lock().await;
    let mut rig = Rig::start(Persistence::AofAlways).await;
    let voucher = rig.app.live_voucher(40).await;
    let mut tally = Tally::default();
    // Rounds of eight at once, so that some buyers wait for a batch another commits.
    let rounds = |first: u64| (0..2).map(move |round| first + 8 * round..first + 8 * round + 8);
    for users in rounds(1) {
        let answers = buy_all(&rig.app, voucher, users).await;
        assert_all(&answers, 201, "");
        record_all(&mut tally, &answers);
    }
    rig.redis.kill().await;
    rig.redis.restart().await;
    for users in rounds(17) {
        let answers = buy_all(&rig.app, voucher, users).await;
        assert_all(&answers, 201, "");
        record_all(&mut tally, &answers);
    }
    let again = buy_all(&rig.app, voucher, [1, 9]).await;
    assert_all(&again, 409, "already_ordered");
    invariants::read(voucher)
        .await
        .assert_sound(&tally.acknowledged);
}

/// MySQL cut off mid-sale: the drainer (whose connection is severed, and whose second
/// try is refused) answers 503 and her purchase stays queued, holding its unit; so does
/// the next admitted buyer's. A drainer that gives up unlocks the queue at once, so each
/// request meanwhile tries to drain too; rejections are answered as usual all the same.
/// Once MySQL is back, the first buyer's next press commits both queued purchases.
/// Bound: no queued purchase is lost or resold through the outage, and one press each
/// after it settles every buyer (201 for the drainer, `already_ordered` for the other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_cut_off_keeps_purchases_queued_until_it_is_back() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(Persistence::None).await;
    let voucher = rig.app.live_voucher(3).await;
    let sale = rig.sale(voucher).await;
    let mut tally = Tally::default();

    let first = rig.app.buy(voucher, 1).await;
    tally.purchase(1, &first);
    assert_is(&first, 201, "", 1);

    // Cut while buyer 2's group commit is on its way to MySQL (its connection held in
    // the slowed proxy), then refuse every new connection.
    rig.proxy.set_latency(Duration::from_millis(300));
    let stats = rig.proxy.stats();
    let arrived = || stats.statements_arrived.load(Ordering::SeqCst);
    let before = arrived();
    let severed = {
        let app = rig.app.clone();
        tokio::spawn(async move { app.buy(voucher, 2).await })
    };
    until_queued(&rig, voucher, 1).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while arrived() == before {
        assert!(Instant::now() < deadline, "the drain never reached MySQL");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    rig.proxy.cut();
    let severed = severed.await.unwrap();
    rig.proxy.set_latency(Duration::ZERO);
    tally.purchase(2, &severed);
    assert_is(&severed, 503, "unavailable", 2);
    let (user, order_2) = queued_orders(&sale).await[0];
    assert_eq!(user, 2);
    assert_eq!(rig.redis_stock(voucher).await, Some(1));
    assert_eq!(
        sale.record(UserId::from_raw(2)).await,
        Some(Record::Queued(sale.queue().await[0].ticket))
    );

    // Buyer 3 is admitted, finds the queue unlocked, drains, and fails the same way.
    assert_eq!(
        sale.lease().await,
        None,
        "a drainer that gave up kept the lock"
    );
    let third = rig.app.buy(voucher, 3).await;
    tally.purchase(3, &third);
    assert_is(&third, 503, "unavailable", 3);
    let queued = queued_orders(&sale).await;
    assert_eq!(queued.iter().map(|(u, _)| *u).collect::<Vec<_>>(), [2, 3]);
    let order_3 = queued[1].1;
    assert_eq!(rig.redis_stock(voucher).await, Some(0));

    // The others hear sold_out: the units are the queued buyers'. Each finds the queue
    // unlocked and tries to drain, in vain, without it showing.
    let (_, refused, _) = rig.mysql_counters();
    let sold_out = buy_each(&rig.app, voucher, 4..=6).await;
    assert_all(&sold_out, 409, "sold_out");
    record_all(&mut tally, &sold_out);
    assert!(
        rig.mysql_counters().1 >= refused + 3,
        "a press did not try to drain"
    );
    assert_eq!(
        sale.lease().await,
        None,
        "a drainer that gave up kept the lock"
    );
    assert_eq!(queued_orders(&sale).await, queued);
    let health = rig.app.get("/health", ADMIN_TOKEN).await;
    assert_eq!(health.status.as_u16(), 503);
    assert_eq!(health.body["mysql"], "down");
    assert_eq!(health.body["redis"], "ok");
    assert!(stats.severed.load(Ordering::SeqCst) >= 1);
    assert!(stats.refused.load(Ordering::SeqCst) >= 5);
    let record = rig.redis.sale(voucher).await;
    assert_eq!(record.orders.len(), 1);
    record.assert_sound(&tally.acknowledged);

    // Back: buyer 2's next press finds nothing holding the queue, and drains it.
    rig.proxy.restore();
    let committed = rig.app.buy(voucher, 2).await;
    tally.purchase(2, &committed);
    assert_names(&committed, 409, order_2, 2);
    let shown = buy_each(&rig.app, voucher, [3, 2]).await;
    record_all(&mut tally, &shown);
    assert_names(&shown[0].1, 409, order_3, 3);
    assert_names(&shown[1].1, 409, order_2, 2);
    let late = buy_each(&rig.app, voucher, 4..=6).await;
    assert_all(&late, 409, "sold_out");
    record_all(&mut tally, &late);

    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&tally.acknowledged);
    assert_eq!(record.orders.len(), 3);
    record.assert_redis_agrees();
    println!("faults: mysql cut off: {tally}");
    assert_eq!(tally.total(), 12);
    assert_eq!(tally.of(503, "unavailable"), 2);
}

/// MySQL commits a group commit but its reply is lost (the connection closes after the
/// statement ran). The drainer tries again on a fresh connection; the batch written
/// twice commits once. Bound: one lost reply costs exactly one more connection and one
/// more statement, and the buyer still hears 201 for the one order, stock moved once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_commits_but_the_reply_is_lost() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(Persistence::None).await;
    let voucher = rig.app.live_voucher(3).await;
    let mut tally = Tally::default();

    let (forwarded, _, statements) = rig.mysql_counters();
    rig.proxy.lose_statement_replies(1);
    let lost = rig.app.buy(voucher, 1).await;
    tally.purchase(1, &lost);
    assert_is(&lost, 201, "", 1);
    let order = lost.order_id().unwrap();
    let stats = rig.proxy.stats();
    assert_eq!(stats.replies_lost.load(Ordering::SeqCst), 1);
    let (forwarded_after, _, statements_after) = rig.mysql_counters();
    // The WASIp3 build sends the CALL on a connection its instance kept, when it has
    // one: then the retry's is the one new connection.
    let connections = forwarded_after - forwarded;
    assert_eq!(
        statements_after - statements,
        2,
        "statements for one purchase with its reply lost once"
    );
    assert!(
        connections == 2 || p3() && connections == 1,
        "{connections} connections for one purchase with its reply lost once"
    );
    let record = rig.redis.sale(voucher).await;
    assert_eq!(record.orders, [(order, 1)].into_iter().collect());
    assert_eq!(record.mysql_stock, 2);
    record.assert_settled(&tally.acknowledged);

    // The buyer presses again and is shown the order.
    let retry = rig.app.buy(voucher, 1).await;
    tally.purchase(1, &retry);
    assert_names(&retry, 409, order, 1);

    // And the two units left sell to two of the next four buyers.
    let rest = buy_all(&rig.app, voucher, 2..=5).await;
    record_all(&mut tally, &rest);
    assert_eq!(rest.iter().filter(|(_, a)| a.status == 201).count(), 2);
    assert_eq!(
        rest.iter().filter(|(_, a)| a.error() == "sold_out").count(),
        2
    );
    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&tally.acknowledged);
    assert_eq!(record.orders.len(), 3);
    record.assert_redis_agrees();
    println!("faults: mysql reply lost after commit: {tally}");
}

/// MySQL slower than the drainer's lease (2 s): every chunk through the proxy waits
/// `LATENCY`, so one group commit (the greeting and four round trips: log-in, the
/// driver's settings query, prepare, CALL) takes 2.7 s or more. (The WASIp3 build's
/// instance kept the creation's connection: it is cut first, so that its drainers too
/// open theirs.) Buyer 1 drains her own
/// purchase; her lease lapses under her, buyer 2 takes it over and writes the queue
/// (buyers 1, 2, 3) again, and buyer 1's publication is refused, the lease being no
/// longer hers; the same happens to buyer 2 with buyer 3, and to buyer 3, whose lease
/// lapses with nobody left to take it. Bound: three drainers, one connection (the default
/// build) and one CALL each, or two when the second's batch took buyer 3 too, each
/// answering from MySQL's verdicts; each order committed once (three orders, stock
/// moved by three); each admitted buyer hears exactly one 201 and nobody a 5xx; and the
/// three purchases left queued by the refused publications are settled by the next
/// request of the voucher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_slower_than_the_lease() {
    const LATENCY: Duration = Duration::from_millis(300);
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(Persistence::None).await;
    let voucher = rig.app.live_voucher(3).await;
    let sale = rig.sale(voucher).await;
    rig.proxy.cut();
    rig.proxy.restore();
    let (forwarded, _, statements) = rig.mysql_counters();
    rig.proxy.set_latency(LATENCY);
    let started = Instant::now();

    // Buyer 1 is admitted first and drains alone; buyers 2..=7 come while she commits.
    let first = {
        let app = rig.app.clone();
        tokio::spawn(async move { app.buy(voucher, 1).await })
    };
    until_queued(&rig, voucher, 1).await;
    let rest = buy_all(&rig.app, voucher, 2..=7).await;
    let first = first.await.unwrap();
    let took = started.elapsed();
    rig.proxy.set_latency(Duration::ZERO);
    let (forwarded_after, _, statements_after) = rig.mysql_counters();
    let (connections, calls) = (forwarded_after - forwarded, statements_after - statements);

    let mut tally = Tally::default();
    tally.purchase(1, &first);
    record_all(&mut tally, &rest);
    assert_is(&first, 201, "", 1);
    let mut answers = vec![(1, first)];
    answers.extend(rest);
    for (user, answer) in &answers {
        assert!(
            matches!(
                (answer.status.as_u16(), answer.error()),
                (201, "") | (409, "sold_out")
            ),
            "buyer {user}: {answer:?}"
        );
    }
    assert_eq!(tally.of(201, ""), 3, "{tally}");
    assert_eq!(tally.of(409, "sold_out"), 4, "{tally}");
    if p3() {
        assert!(
            (2..=3).contains(&calls) && connections <= calls,
            "{connections} connections and {calls} statements for the drainers"
        );
    } else {
        assert_eq!(
            (connections, calls),
            (3, 3),
            "(connections, statements) of the drainers"
        );
    }
    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&tally.acknowledged);
    assert_eq!(record.orders.len(), 3, "{record:?}");
    assert_eq!(record.mysql_stock, 0);
    assert_eq!(record.redis_queued, 3, "publications refused");

    // The next request of the voucher (the last lease has lapsed) settles them.
    sale.expire_lease().await;
    let late = rig.app.buy(voucher, 8).await;
    tally.purchase(8, &late);
    assert_is(&late, 409, "sold_out", 8);
    let record = rig.redis.sale(voucher).await;
    record.assert_settled(&tally.acknowledged);
    for (order, user) in &tally.acknowledged.clone() {
        let again = rig.app.buy(voucher, *user).await;
        tally.purchase(*user, &again);
        assert_names(&again, 409, *order, *user);
    }
    println!(
        "faults: mysql slower than the lease ({LATENCY:?} each way): {tally} {connections} connections and {calls} statements for 3 orders, all 3 left queued; {:.1} s",
        took.as_secs_f64()
    );
}

/// `user`'s purchase, admitted, with its group commit waiting inside MySQL behind a
/// [`RowLock`] on the voucher.
async fn held_in_mysql(rig: &Rig, voucher: u64, user: u64) -> JoinHandle<reqwest::Result<Answer>> {
    let (.., statements) = rig.mysql_counters();
    let app = rig.app.clone();
    let path = format!("/vouchers/{voucher}/orders");
    let purchase = tokio::spawn(async move {
        app.try_call(Method::POST, &path, Some(&buyer_token(user)), None)
            .await
    });
    until_queued(rig, voucher, 1).await;
    rig.until_statements(statements + 1).await;
    purchase
}

/// Kills Spin (SIGKILL) under `purchase`, so the client gets no answer, and starts it
/// again on the same address. Returns how long the dead request's lease had left.
async fn die(rig: &Rig, voucher: u64, purchase: JoinHandle<reqwest::Result<Answer>>) -> i64 {
    rig.app.crash();
    let lease_left: i64 = rig
        .redis
        .conn()
        .await
        .pttl(keys(voucher).lease())
        .await
        .unwrap();
    let answer = purchase.await.unwrap();
    assert!(answer.is_err(), "a killed Spin answered: {answer:?}");
    rig.app.restart();
    lease_left
}

/// A request that dies after admission, while its group commit waits inside MySQL
/// (Spin killed). Its purchase stays queued and keeps its unit, and the next purchase
/// request of the voucher after the lease lapses commits it, whoever makes it (a
/// newcomer who is sold a unit, or one told `sold_out`); the buyer's next press hears
/// `already_ordered`. Bound: a dead request holds the queue up no longer than its lease
/// (measured: the lease's time left at the death, at most `LEASE_MS`), and its purchase
/// is never resold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dying_after_admission_leaves_its_purchase_to_the_next_request() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(Persistence::None).await;
    let app = rig.app.clone();
    let mut tally = Tally::default();
    let mut last_unit = Tally::default();

    // Two units. While her purchase is in MySQL, the buyer pressing again is busy.
    let voucher = app.live_voucher(2).await;
    let sale = rig.sale(voucher).await;
    let lock = RowLock::hold(BucketId::from_raw(voucher)).await;
    let purchase = held_in_mysql(&rig, voucher, 1).await;
    let (_, order) = queued_orders(&sale).await[0];
    let busy = app.buy(voucher, 1).await;
    tally.purchase(1, &busy);
    assert_is(&busy, 429, "busy", 1);
    assert_eq!(busy.headers["retry-after"], "1");
    let lease_left = die(&rig, voucher, purchase).await;
    tally.died();
    assert!(
        (1..=LEASE_MS).contains(&lease_left),
        "lease left: {lease_left} ms"
    );
    assert_eq!(queued_orders(&sale).await, [(1, order)]);
    assert_eq!(rig.redis_stock(voucher).await, Some(1));
    // MySQL lets the dead request's commit through, if it still runs; the lease lapses
    // (deleted, as its TTL would) and a newcomer's purchase commits hers with its own.
    lock.release().await;
    sale.expire_lease().await;
    let newcomer = app.buy(voucher, 2).await;
    tally.purchase(2, &newcomer);
    assert_is(&newcomer, 201, "", 2);
    let again = app.buy(voucher, 1).await;
    tally.purchase(1, &again);
    assert_names(&again, 409, order, 1);
    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&tally.acknowledged);
    assert_eq!(record.orders.get(&order), Some(&1));
    assert_eq!(record.orders.len(), 2);
    record.assert_redis_agrees();

    // The last unit: it stays the dying request's buyer's, and the request that commits
    // her purchase is told sold_out.
    let voucher = app.live_voucher(1).await;
    let sale = rig.sale(voucher).await;
    let lock = RowLock::hold(BucketId::from_raw(voucher)).await;
    let purchase = held_in_mysql(&rig, voucher, 10).await;
    let (_, order) = queued_orders(&sale).await[0];
    let early = app.buy(voucher, 11).await;
    last_unit.purchase(11, &early);
    assert_is(&early, 409, "sold_out", 11);
    let last_lease_left = die(&rig, voucher, purchase).await;
    last_unit.died();
    assert!(
        (1..=LEASE_MS).contains(&last_lease_left),
        "lease left: {last_lease_left} ms"
    );
    assert_eq!(queued_orders(&sale).await, [(10, order)]);
    lock.release().await;
    sale.expire_lease().await;
    let rescuer = app.buy(voucher, 11).await;
    last_unit.purchase(11, &rescuer);
    assert_is(&rescuer, 409, "sold_out", 11);
    assert_eq!(sale.queue().await, []);
    let again = app.buy(voucher, 10).await;
    last_unit.purchase(10, &again);
    assert_names(&again, 409, order, 10);
    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&last_unit.acknowledged);
    assert_eq!(record.orders, [(order, 10)].into_iter().collect());
    record.assert_redis_agrees();
    println!(
        "faults: request dies after admission: two units {tally} last unit {last_unit} the dead request's lease had {lease_left} ms and {last_lease_left} ms left"
    );
}

/// Order ids are `seconds << 32 | sequence`, the sequence from a per-day Redis key. A
/// Redis restart without persistence loses the key; the admission script seeds a lost
/// day key from the time of day (8 per millisecond, `lua/admission.lua`), so the
/// restarted sequence starts above every number handed out earlier that day unless more
/// than 8 orders per millisecond were taken since midnight. Should an id collide all the
/// same, `seckill_commit_batch` refuses it (`id_taken`): the purchase ends in a clean 503,
/// its unit goes back, and the buyer's next press buys. Bound: 21 orders, 21 distinct
/// ids, and one 503 for the collision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_ids_stay_unique_across_a_redis_restart() {
    let _serial = SERIAL.lock().await;
    let mut rig = Rig::start(Persistence::None).await;
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
    let distinct: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), 20, "{ids:?}");
    let seconds = |id: &u64| id >> 32;
    let first_seconds: HashSet<u64> = ids[..10].iter().map(seconds).collect();
    let same_second = ids[10..]
        .iter()
        .filter(|id| first_seconds.contains(&seconds(id)))
        .count();
    // Within a second both drew from, the restarted sequence starts above the earlier.
    for later in &ids[10..] {
        let earlier = ids[..10].iter().filter(|id| seconds(id) == seconds(later));
        if let Some(before_max) = earlier.map(|id| id & 0xffff_ffff).max() {
            assert!(
                later & 0xffff_ffff > before_max,
                "the restarted sequence ({later}) does not start above the earlier one ({before_max})"
            );
        }
    }

    // A collision all the same: make the next id one that MySQL already holds.
    let mut conn = rig.redis.conn().await;
    let (now, _): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let slot = u64::from(Keys::new(BucketId::from_raw(voucher)).slot()) << 18;
    let next = slot | ((1 << 18) - 1000);
    set_sequence(&mut conn, voucher, (1 << 18) - 1001).await;
    let squatter_voucher = fresh_voucher_id();
    let taken: Vec<(u64, u64, u64, u64)> = (now - 2..=now + 5)
        .enumerate()
        .map(|(i, s)| {
            (
                OrderId::compose(s, next as i64).unwrap().raw(),
                1_000_000 + i as u64,
                squatter_voucher,
                squatter_voucher,
            )
        })
        .collect();
    let mut db = scripts::connect().await.unwrap();
    db.exec_batch(
        "INSERT INTO tb_voucher_order (id, user_id, voucher_id, sale_id, status, create_time) \
         VALUES (?, ?, ?, ?, 1, UTC_TIMESTAMP())",
        taken.iter().copied(),
    )
    .await
    .unwrap();
    db.disconnect().await.unwrap();
    let stock = rig.redis_stock(voucher).await;
    let collided = rig.app.buy(voucher, 21).await;
    tally.purchase(21, &collided);
    let after_collision = (
        rig.redis_stock(voucher).await,
        rig.queued(voucher).await,
        rig.redis.buyer_record(voucher, 21).await,
    );
    // The collision drew `next`: whichever second the retry falls in, it draws the one
    // after.
    set_sequence(&mut conn, voucher, (1 << 18) - 1000).await;
    let retried = rig.app.buy(voucher, 21).await;
    tally.purchase(21, &retried);
    let squatters = "DELETE FROM tb_voucher_order WHERE voucher_id = ?";
    mysql_exec(squatters, (squatter_voucher,)).await;
    assert_is(&collided, 503, "unavailable", 21);
    assert_eq!(
        collided.body["message"],
        "service temporarily unavailable: order id collision; retry"
    );
    assert_eq!(
        after_collision,
        (stock, 0, None),
        "the unit did not go back"
    );
    assert_is(&retried, 201, "", 21);
    assert_eq!(retried.order_id().unwrap() & 0xffff_ffff, next + 1);
    clear_sequence(&mut conn, voucher, now).await;

    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&tally.acknowledged);
    assert_eq!(record.orders.len(), 21);
    record.assert_redis_agrees();
    println!(
        "faults: order ids across a Redis restart: {tally} {same_second} of the 10 later ids share a second with an earlier one, all 21 distinct"
    );
}

/// Sets the count of the voucher's order sequence for the next seconds of Redis's clock,
/// so that the next admission of any of them draws `count + 1`.
async fn set_sequence(conn: &mut redis::aio::MultiplexedConnection, voucher: u64, count: u64) {
    let (now, _): (i64, i64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    for key in sequence_keys(voucher, now - 1..=now + 5) {
        let _: () = conn.set_ex(key, count, 60).await.unwrap();
    }
}

/// Deletes the sequence keys of the seconds from `since` to a few seconds from now.
async fn clear_sequence(conn: &mut redis::aio::MultiplexedConnection, voucher: u64, since: i64) {
    let (now, _): (i64, i64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    let _: () = conn
        .del(sequence_keys(voucher, since - 2..=now + 5))
        .await
        .unwrap();
}

fn sequence_keys(voucher: u64, seconds: std::ops::RangeInclusive<i64>) -> Vec<String> {
    let prefix = Keys::new(BucketId::from_raw(voucher)).order_sequence();
    seconds.map(|s| format!("{prefix}:{s}")).collect()
}

/// The slot's order sequence of the second at or past 2^18, where order ids have no room
/// for it: admission fails (a script error, before it takes anything), so the buyer hears
/// a clean 503 and stock, queue, buyers and lease stay as they were. Bound: the largest
/// count that fits (2^18 - 1) is still sold; the next one never is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_order_sequence_takes_nothing() {
    let _serial = SERIAL.lock().await;
    let rig = Rig::start(Persistence::None).await;
    let voucher = rig.app.live_voucher(3).await;
    let sale = rig.sale(voucher).await;
    let mut conn = rig.redis.conn().await;
    let (now, _): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let slot = u64::from(Keys::new(BucketId::from_raw(voucher)).slot()) << 18;
    let mut tally = Tally::default();

    // The admission's INCR would hand out 2^18, 2^18 + 1, 2^40 + 1.
    for last in [(1u64 << 18) - 1, 1 << 18, 1 << 40] {
        set_sequence(&mut conn, voucher, last).await;
        let refused = rig.app.buy(voucher, 1).await;
        tally.purchase(1, &refused);
        assert_is(&refused, 503, "unavailable", 1);
        assert_eq!(rig.redis_stock(voucher).await, Some(3));
        assert_eq!(sale.queue().await, []);
        assert_eq!(sale.records().await, Vec::new());
        assert_eq!(sale.lease().await, None);
        let record = rig.redis.sale(voucher).await;
        assert_eq!(record.orders.len(), 0);
        assert_eq!(record.mysql_stock, 3);
    }

    // The last sequence that fits is sold; the buyer is not held up by the refusals.
    set_sequence(&mut conn, voucher, (1 << 18) - 2).await;
    let last = rig.app.buy(voucher, 1).await;
    tally.purchase(1, &last);
    assert_is(&last, 201, "", 1);
    assert_eq!(
        last.order_id().unwrap() & 0xffff_ffff,
        slot | ((1 << 18) - 1)
    );
    // Whichever second the next press falls in, its count is used up.
    set_sequence(&mut conn, voucher, (1 << 18) - 1).await;
    let past = rig.app.buy(voucher, 2).await;
    tally.purchase(2, &past);
    assert_is(&past, 503, "unavailable", 2);
    // A sane sequence again: sales go on.
    clear_sequence(&mut conn, voucher, now).await;
    let again = rig.app.buy(voucher, 2).await;
    tally.purchase(2, &again);
    assert_is(&again, 201, "", 2);
    let record = rig.redis.sale(voucher).await;
    record.assert_sound(&tally.acknowledged);
    assert_eq!(record.orders.len(), 2);
    record.assert_redis_agrees();
    println!("faults: exhausted order sequence: {tally}");
}

/// How Redis comes back with less than it had acknowledged.
#[derive(Debug, Clone, Copy)]
enum Rollback {
    /// Restarted from an RDB snapshot taken before the last purchase.
    Snapshot,
    /// Restarted from an `everysec` append-only file whose last second never reached the
    /// disk (the machine died).
    AofLastSecond,
    /// A replica that had not received the last purchase promoted in the primary's place.
    Failover,
}

/// Redis comes back behind MySQL: its state of the voucher is whole, but without the
/// last buyer's purchase. The first group commit after that finds MySQL holding more
/// orders than Redis learnt of, and the sale answers as for lost state (`503`) until the
/// admin's sync: the buyer who ordered before the rollback is never told `sold_out`,
/// nothing is oversold, and she hears her order id once the sync ran.
async fn redis_behind_mysql(rollback: Rollback) -> Tally {
    let persistence = match rollback {
        Rollback::Snapshot | Rollback::Failover => Persistence::None,
        Rollback::AofLastSecond => Persistence::AofEverysec,
    };
    let mut rig = Rig::start(persistence).await;
    let voucher = rig.app.live_voucher(2).await;
    let mut tally = Tally::default();
    let mut conn = rig.redis.conn().await;
    let _: () = redis::cmd("SAVE").query_async(&mut conn).await.unwrap();
    let aof = match rollback {
        Rollback::AofLastSecond => Some(rig.redis.aof_len()),
        _ => None,
    };
    // A replica in step with the primary, cut off from it just before the purchase.
    let replica = match rollback {
        Rollback::Failover => {
            let replica = RedisServer::start_replica(&rig.redis).await;
            replica.promote().await;
            Some(replica)
        }
        _ => None,
    };

    let (a, b, c) = (1, 2, 3);
    let ordered = buy_each(&rig.app, voucher, [a]).await;
    assert_eq!(ordered[0].1.status, StatusCode::CREATED, "{ordered:?}");
    let a_order = ordered[0].1.order_id().unwrap();
    record_all(&mut tally, &ordered);

    rig.redis.kill().await;
    if let Some(aof) = &aof {
        rig.redis.cut_aof(aof);
    }
    match replica {
        Some(replica) => rig.fail_over_to(replica).await,
        None => rig.redis.restart().await,
    }
    // A's purchase never happened, as Redis sees it.
    assert_eq!(rig.redis_stock(voucher).await, Some(2));
    assert_eq!(rig.redis.buyer_record(voucher, a).await, None);

    // B buys the last unit; her commit tells Redis it is behind (in the publication that
    // follows her early 201: C and A press once it has landed).
    let bought = buy_each(&rig.app, voucher, [b]).await;
    assert_eq!(bought[0].1.status, StatusCode::CREATED, "{bought:?}");
    rig.sale(voucher).await.drained().await;
    let after = buy_each(&rig.app, voucher, [c, a]).await;
    for (user, answer) in &after {
        assert_is(answer, 503, "unavailable", *user);
    }
    record_all(&mut tally, &bought);
    record_all(&mut tally, &after);
    let health = rig.app.get("/health", ADMIN_TOKEN).await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.body["stale_vouchers"], serde_json::json!([voucher]));

    let sync = rig.sync(voucher).await;
    assert_eq!(sync.status, StatusCode::OK, "{sync:?}");
    let settled = buy_each(&rig.app, voucher, [a, c]).await;
    assert_names(&settled[0].1, 409, a_order, a);
    assert_is(&settled[1].1, 409, "sold_out", c);
    record_all(&mut tally, &settled);
    let health = rig.app.get("/health", ADMIN_TOKEN).await;
    assert_eq!(health.body.get("stale_vouchers"), None, "{health:?}");

    let record = invariants::read(voucher).await;
    assert_eq!(record.orders.len(), 2, "{record:?}");
    assert_eq!(record.mysql_stock, 0);
    record.assert_sound(&tally.acknowledged);
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_from_an_older_snapshot_is_caught_and_waits_for_a_sync() {
    serially(
        "redis restarted from an older snapshot",
        redis_behind_mysql(Rollback::Snapshot),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_that_lost_its_last_aof_second_is_caught_and_waits_for_a_sync() {
    serially(
        "redis restarted without its AOF's last second",
        redis_behind_mysql(Rollback::AofLastSecond),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_replica_behind_is_caught_and_waits_for_a_sync() {
    serially(
        "failover to a replica that missed the last purchase",
        redis_behind_mysql(Rollback::Failover),
    )
    .await;
}
