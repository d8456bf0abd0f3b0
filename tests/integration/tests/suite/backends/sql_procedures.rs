//! The stored procedures of `migrations/`, called against the real MariaDB the way Spin
//! calls them: one prepared `CALL` on a connection of its own.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use seckill_core::buckets::Spread;
use seckill_core::ledger::ReturnKind;
use seckill_core::sql;
use seckill_core::verdict::Verdict;
use seckill_core::{BucketId, OrderId, UserId};
use seckill_tests::drivers::scripts::{
    self, commit_batch, commit_batch_on, connect, end_transaction, feed_page, open_transaction,
    RowLock,
};
use seckill_tests::servers::local::{fresh_voucher_id, mysql_exec, mysql_first, mysql_rows};

/// A voucher on sale since a minute ago, for an hour.
async fn create_voucher(stock: u32) -> BucketId {
    scripts::create_voucher(stock, -60, 3600)
        .await
        .first_bucket()
}

/// A sale of `stock` units on sale since a minute ago, for an hour, in two buckets.
async fn two_buckets(stock: u32) -> (BucketId, BucketId) {
    let buckets = scripts::create_bucketed(stock, 2, -60, 3600).await;
    let [a, b] = *buckets.all() else {
        panic!("two buckets")
    };
    (a, b)
}

/// MySQL's stock of the voucher and its orders, order id -> user id.
async fn stock_and_orders(voucher_id: BucketId) -> (u32, BTreeMap<OrderId, UserId>) {
    let stock: u32 = mysql_first(
        "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?",
        (voucher_id.raw(),),
    )
    .await
    .unwrap();
    let orders: Vec<(u64, u64)> = mysql_rows(
        "SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = ?",
        (voucher_id.raw(),),
    )
    .await;
    let orders = orders
        .into_iter()
        .map(|(id, user)| (OrderId::from_raw(id), UserId::from_raw(user)))
        .collect();
    (stock, orders)
}

/// Order ids unique to this voucher, so tests never collide with each other: of seconds
/// far ahead (2058 on), after every voucher's creation, as the group commit takes them.
fn order_id(voucher_id: BucketId, n: u64) -> OrderId {
    OrderId::from_raw((1 << 62) | (voucher_id.raw() << 20) | n)
}

fn user(raw: u64) -> UserId {
    UserId::from_raw(raw)
}

/// The purchase of buyer `n` with the order id `order_id(voucher_id, n)`.
fn purchase(voucher_id: BucketId, n: u64) -> (OrderId, UserId) {
    (order_id(voucher_id, n), user(n))
}

/// MySQL's verdicts on a batch of `(order id, buyer)`.
async fn commit(voucher_id: BucketId, batch: &[(OrderId, UserId)]) -> Vec<Verdict> {
    commit_batch(voucher_id, batch).await.unwrap().verdicts
}

// ---- seckill_commit_batch ----

#[tokio::test]
async fn a_batch_commits_its_orders_and_lowers_the_stock_by_their_number() {
    let voucher = create_voucher(10).await;
    let batch: Vec<_> = (1..=3).map(|u| purchase(voucher, u)).collect();
    let verdicts = commit(voucher, &batch).await;
    assert_eq!(
        verdicts,
        batch.iter().map(|_| Verdict::Ordered).collect::<Vec<_>>()
    );
    assert_eq!(
        stock_and_orders(voucher).await,
        (7, batch.into_iter().collect())
    );
}

#[tokio::test]
async fn past_the_stock_the_first_entries_are_ordered_and_the_rest_sold_out() {
    // Batch order, not order id order, decides who gets the units.
    let voucher = create_voucher(2).await;
    let batch = [5, 3, 9, 1].map(|u| purchase(voucher, u));
    let ids = batch.map(|(id, _)| id);
    assert_eq!(
        commit(voucher, &batch).await,
        [
            Verdict::Ordered,
            Verdict::Ordered,
            Verdict::SoldOut,
            Verdict::SoldOut
        ]
    );
    assert_eq!(
        stock_and_orders(voucher).await,
        (0, BTreeMap::from([(ids[0], user(5)), (ids[1], user(3))]))
    );
    // Nothing left for a later batch either.
    let later = [purchase(voucher, 7)];
    assert_eq!(commit(voucher, &later).await, [Verdict::SoldOut]);
    assert_eq!(stock_and_orders(voucher).await.0, 0);
}

#[tokio::test]
async fn a_batch_written_again_changes_nothing_and_reads_the_same() {
    let voucher = create_voucher(3).await;
    let mut batch: Vec<_> = (1..=4).map(|u| purchase(voucher, u)).collect();
    // A buyer twice in one batch: her second purchase is a duplicate.
    batch.insert(1, (order_id(voucher, 11), user(1)));
    let first = commit(voucher, &batch).await;
    assert_eq!(
        first,
        [
            Verdict::Ordered,
            Verdict::Duplicate(batch[0].0, 1),
            Verdict::Ordered,
            Verdict::Ordered,
            Verdict::SoldOut,
        ]
    );
    let after_first = stock_and_orders(voucher).await;
    assert_eq!(after_first.0, 0);
    assert_eq!(after_first.1.len(), 3);
    for _ in 0..2 {
        assert_eq!(commit(voucher, &batch).await, first);
        assert_eq!(stock_and_orders(voucher).await, after_first);
    }
    // Also when only its head is written again, as part of a later batch.
    let later = [batch[0], purchase(voucher, 5)];
    assert_eq!(
        commit(voucher, &later).await,
        [Verdict::Ordered, Verdict::SoldOut]
    );
    assert_eq!(stock_and_orders(voucher).await, after_first);
}

#[tokio::test]
async fn a_buyer_holding_another_order_is_a_duplicate_and_takes_no_unit() {
    let voucher = create_voucher(5).await;
    let first = order_id(voucher, 1);
    assert_eq!(
        commit(voucher, &[(first, user(42))]).await,
        [Verdict::Ordered]
    );
    let (again, other) = (order_id(voucher, 2), order_id(voucher, 3));
    assert_eq!(
        commit(voucher, &[(again, user(42)), (other, user(43))]).await,
        [Verdict::Duplicate(first, 1), Verdict::Ordered]
    );
    assert_eq!(
        stock_and_orders(voucher).await,
        (3, BTreeMap::from([(first, user(42)), (other, user(43))]))
    );
    // Her order of another voucher is no obstacle.
    let elsewhere = create_voucher(5).await;
    let there = order_id(elsewhere, 1);
    assert_eq!(
        commit(elsewhere, &[(there, user(42))]).await,
        [Verdict::Ordered]
    );
    assert_eq!(stock_and_orders(voucher).await.0, 3);
}

#[tokio::test]
async fn an_order_id_used_by_another_order_is_id_taken() {
    let (a, b) = (create_voucher(5).await, create_voucher(5).await);
    let id = order_id(a, 1);
    assert_eq!(commit(a, &[(id, user(1))]).await, [Verdict::Ordered]);
    // Another voucher's purchase drew the same id (a sequence lost in a Redis restart).
    let own = order_id(b, 2);
    assert_eq!(
        commit(b, &[(id, user(2)), (own, user(3))]).await,
        [Verdict::IdTaken, Verdict::Ordered]
    );
    assert_eq!(
        stock_and_orders(b).await,
        (4, BTreeMap::from([(own, user(3))]))
    );
    // And another buyer of the same voucher.
    assert_eq!(commit(a, &[(id, user(7))]).await, [Verdict::IdTaken]);
    assert_eq!(
        stock_and_orders(a).await,
        (4, BTreeMap::from([(id, user(1))]))
    );
}

#[tokio::test]
async fn concurrent_single_purchase_batches_never_oversell() {
    let voucher = create_voucher(10).await;
    // Each on a connection of its own, as each drainer's Spin request opens one.
    let tasks: Vec<_> = (1..=60u64)
        .map(|n| {
            tokio::spawn(async move {
                let (id, user) = purchase(voucher, n);
                (id, user, commit_batch(voucher, &[(id, user)]).await)
            })
        })
        .collect();
    let mut orders = BTreeMap::new();
    let mut sold = 0;
    for task in tasks {
        let (id, user, committed) = task.await.unwrap();
        let verdicts = committed
            .unwrap_or_else(|error| panic!("buyer {user}: {error}"))
            .verdicts;
        if verdicts == [Verdict::Ordered] {
            orders.insert(id, user);
        } else {
            assert_eq!(verdicts, [Verdict::SoldOut], "buyer {user}");
            sold += 1;
        }
    }
    assert_eq!((orders.len(), sold), (10, 50));
    assert_eq!(stock_and_orders(voucher).await, (0, orders));
}

#[tokio::test]
async fn overlapping_batches_committed_at_once_commit_each_order_once() {
    let voucher = create_voucher(30).await;
    let entries: Vec<_> = (1..=20).map(|u| purchase(voucher, u)).collect();
    let batches = [
        entries[..15].to_vec(),
        entries[5..].to_vec(),
        entries.clone(),
        entries.clone(),
    ];
    let tasks: Vec<_> = batches
        .iter()
        .map(|batch| spawn_batch(voucher, batch))
        .collect();
    for (task, batch) in tasks.into_iter().zip(&batches) {
        let verdicts = task.await.unwrap().unwrap();
        let expected: Vec<Verdict> = batch.iter().map(|_| Verdict::Ordered).collect();
        assert_eq!(verdicts, expected);
    }
    assert_eq!(
        stock_and_orders(voucher).await,
        (10, entries.into_iter().collect())
    );

    // Past the stock, every copy reads the same: the same units, each order once.
    let voucher = create_voucher(5).await;
    let batch: Vec<_> = (1..=8).map(|u| purchase(voucher, u)).collect();
    let tasks: Vec<_> = (0..4).map(|_| spawn_batch(voucher, &batch)).collect();
    let expected: Vec<Verdict> = (0..batch.len())
        .map(|i| {
            if i < 5 {
                Verdict::Ordered
            } else {
                Verdict::SoldOut
            }
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap(), expected);
    }
    assert_eq!(
        stock_and_orders(voucher).await,
        (0, batch[..5].iter().copied().collect())
    );
}

#[tokio::test]
async fn an_empty_batch_has_no_rows_and_changes_nothing() {
    let voucher = create_voucher(3).await;
    assert_eq!(commit(voucher, &[]).await, Vec::<Verdict>::new());
    assert_eq!(stock_and_orders(voucher).await, (3, BTreeMap::new()));
}

#[tokio::test]
async fn an_unknown_voucher_sells_nothing() {
    let voucher = BucketId::from_raw(fresh_voucher_id());
    let batch: Vec<_> = (1..=3).map(|u| purchase(voucher, u)).collect();
    assert_eq!(
        commit(voucher, &batch).await,
        batch.iter().map(|_| Verdict::SoldOut).collect::<Vec<_>>()
    );
    let mut conn = connect().await.unwrap();
    let rows: u64 = conn
        .exec_first(
            "SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ? OR id IN (?, ?, ?)",
            (
                voucher.raw(),
                batch[0].0.raw(),
                batch[1].0.raw(),
                batch[2].0.raw(),
            ),
        )
        .await
        .unwrap()
        .unwrap();
    conn.disconnect().await.unwrap();
    assert_eq!(rows, 0);
}

/// Gives batches just started the time to reach the lock an open transaction holds.
/// The outcomes checked are the same without the wait; only the path to them differs
/// (which the deadlock test checks as well).
async fn until_blocked() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// `seckill_commit_batch` on a connection of its own, started: MySQL's verdicts.
fn spawn_batch(voucher: BucketId, batch: &[(OrderId, UserId)]) -> BatchCall {
    let batch = batch.to_vec();
    tokio::spawn(async move {
        commit_batch(voucher, &batch)
            .await
            .map(|committed| committed.verdicts)
    })
}

type BatchCall = tokio::task::JoinHandle<Result<Vec<Verdict>, mysql_async::Error>>;

/// The verdicts of two batches racing for one order id.
async fn verdicts_of(first: BatchCall, second: BatchCall) -> [Vec<Verdict>; 2] {
    [
        first.await.unwrap().unwrap_or_else(|e| panic!("a: {e}")),
        second.await.unwrap().unwrap_or_else(|e| panic!("b: {e}")),
    ]
}

/// Two vouchers' batches of one order id, `a`'s for buyer 1 and `b`'s for buyer 2: one
/// committed the order, the other found its id taken and kept its unit.
async fn assert_one_took_the_id(
    (a, b): (BucketId, BucketId),
    id: OrderId,
    verdicts: &[Vec<Verdict>; 2],
) {
    let ordered = vec![Verdict::Ordered];
    let taken = vec![Verdict::IdTaken];
    assert!(
        *verdicts == [ordered.clone(), taken.clone()] || *verdicts == [taken, ordered.clone()],
        "{verdicts:?}"
    );
    let (winner, buyer, loser) = if verdicts[0] == ordered {
        (a, user(1), b)
    } else {
        (b, user(2), a)
    };
    assert_eq!(
        stock_and_orders(winner).await,
        (0, BTreeMap::from([(id, buyer)]))
    );
    assert_eq!(stock_and_orders(loser).await, (1, BTreeMap::new()));
}

/// A transaction that ran `statement` and has neither committed nor rolled back yet.
async fn uncommitted(
    statement: &str,
    params: impl Into<mysql_async::Params> + Send,
) -> mysql_async::Conn {
    open_transaction::<mysql_async::Row>(statement, params)
        .await
        .0
}

/// A transaction that inserted order `id` of buyer `user_id` for `voucher`, uncommitted.
async fn uncommitted_order(id: OrderId, user_id: u64, voucher: BucketId) -> mysql_async::Conn {
    uncommitted(
        "INSERT INTO tb_voucher_order (id, user_id, voucher_id, sale_id, status, create_time) \
         VALUES (?, ?, ?, ?, 1, UTC_TIMESTAMP())",
        (id.raw(), user_id, voucher.raw(), voucher.raw()),
    )
    .await
}

/// Two vouchers of one unit each and a third of five, with the id of the third's order 2:
/// the id the first two's batches are handed (a sequence lost in a Redis restart).
async fn two_vouchers_and_an_id() -> (BucketId, BucketId, BucketId, OrderId) {
    let (a, b, c) = (
        create_voucher(1).await,
        create_voucher(1).await,
        create_voucher(5).await,
    );
    (a, b, c, order_id(c, 2))
}

/// Asserts that no row is left `FROM rows` (a table and a condition of one parameter);
/// disconnects.
async fn assert_none_left(
    mut conn: mysql_async::Conn,
    rows: &str,
    param: impl Into<mysql_async::Value>,
) {
    let count = format!("SELECT COUNT(*) FROM {rows}");
    let left: u64 = conn
        .exec_first(count, (param.into(),))
        .await
        .unwrap()
        .unwrap();
    conn.disconnect().await.unwrap();
    assert_eq!(left, 0);
}

/// A batch of one purchase of buyer 42 that runs into another transaction's uncommitted
/// order of hers, which then commits (`commit`) or rolls back.
async fn commit_meeting_an_open_order(commit: bool) -> (BucketId, OrderId, OrderId, Vec<Verdict>) {
    let voucher = create_voucher(1).await;
    let (theirs, ours) = (order_id(voucher, 100), order_id(voucher, 1));
    let blocker = uncommitted_order(theirs, 42, voucher).await;
    let call = spawn_batch(voucher, &[(ours, user(42))]);
    until_blocked().await;
    let end = if commit { "COMMIT" } else { "ROLLBACK" };
    end_transaction(blocker, end).await;
    let verdicts = call
        .await
        .unwrap()
        .unwrap_or_else(|error| panic!("the batch failed: {error}"));
    (voucher, theirs, ours, verdicts)
}

#[tokio::test]
async fn two_vouchers_inserting_one_order_id_at_once_are_retried_not_failed() {
    // Two vouchers' batches hold the same order id (a sequence lost in a Redis restart).
    // A third transaction holding the id's gap stops both at it; once it lets go, one
    // inserts the id and the other runs into it: a duplicate key (1062; MariaDB 10.11
    // reports no deadlock here, see the next test for that), and the one that loses
    // must be tried again, not fail.
    let (a, b, c, id) = two_vouchers_and_an_id().await;
    // Orders right below and above the id keep its gap to this test.
    assert_eq!(
        commit(c, &[purchase(c, 1), purchase(c, 3)]).await,
        [Verdict::Ordered, Verdict::Ordered]
    );
    let (gap, none): (_, Option<u64>) = open_transaction(
        "SELECT id FROM tb_voucher_order WHERE id = ? LOCK IN SHARE MODE",
        (id.raw(),),
    )
    .await;
    assert_eq!(none, None);
    let first_call = spawn_batch(a, &[(id, user(1))]);
    let second_call = spawn_batch(b, &[(id, user(2))]);
    until_blocked().await;
    end_transaction(gap, "COMMIT").await;
    let verdicts = verdicts_of(first_call, second_call).await;
    assert_one_took_the_id((a, b), id, &verdicts).await;
}

/// How many deadlocks InnoDB has detected since the server started, whoever's.
async fn deadlocks() -> u64 {
    let mut conn = connect().await.unwrap();
    let (_, count): (String, u64) = conn
        .query_first("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
        .await
        .unwrap()
        .expect("MariaDB counts deadlocks");
    conn.disconnect().await.unwrap();
    count
}

#[tokio::test]
async fn two_vouchers_deadlocking_on_one_order_id_are_retried_not_failed() {
    // Two vouchers' batches hold the same order id. A third transaction has inserted
    // that id and not committed: each batch's insert finds its row and waits for a shared
    // lock on it. It rolls back: both get their shared lock, and each then needs the
    // exclusive one that the other's shared lock keeps from it. InnoDB breaks the
    // deadlock by rolling one back (1213); that one must be tried again, not fail, and
    // then finds the other's order: its id is taken.
    let (a, b, c, id) = two_vouchers_and_an_id().await;
    // Connected beforehand, so that both CALLs reach the row at once, well before the
    // rollback and well within the procedure's one-second lock wait.
    let (mut first_conn, mut second_conn) = (connect().await.unwrap(), connect().await.unwrap());
    let deadlocks_before = deadlocks().await;
    let holder = uncommitted_order(id, 99, c).await;
    let first_call = tokio::spawn(async move {
        let committed = commit_batch_on(&mut first_conn, a, &[(id, user(1))]).await;
        first_conn.disconnect().await.unwrap();
        committed.map(|committed| committed.verdicts)
    });
    let second_call = tokio::spawn(async move {
        let committed = commit_batch_on(&mut second_conn, b, &[(id, user(2))]).await;
        second_conn.disconnect().await.unwrap();
        committed.map(|committed| committed.verdicts)
    });
    until_blocked().await;
    end_transaction(holder, "ROLLBACK").await;
    let verdicts = verdicts_of(first_call, second_call).await;
    let deadlocks_after = deadlocks().await;
    // The server-wide count: another client's deadlock meanwhile could add to it too,
    // but without ours this test's own collision adds nothing (Innodb_deadlocks is
    // untouched by the duplicate-key collision of the test above).
    assert!(
        deadlocks_after > deadlocks_before,
        "MySQL reported no deadlock (Innodb_deadlocks {deadlocks_before} -> {deadlocks_after}): \
         the retry of a deadlock was not exercised; verdicts {verdicts:?}"
    );
    assert_one_took_the_id((a, b), id, &verdicts).await;
    // The rolled-back insert left nothing for voucher c.
    assert_eq!(stock_and_orders(c).await, (5, BTreeMap::new()));
}

#[tokio::test]
async fn a_batch_held_up_on_the_stock_row_gives_up_after_a_second_and_changes_nothing() {
    let voucher = create_voucher(3).await;
    let batch = [purchase(voucher, 1), purchase(voucher, 2)];
    // Another transaction holds the voucher's stock row, as a drainer stuck in MySQL.
    let holder = RowLock::hold(voucher).await;
    let started = Instant::now();
    let error = commit_batch(voucher, &batch).await.unwrap_err();
    let took = started.elapsed();
    match &error {
        mysql_async::Error::Server(server) => assert_eq!(server.code, 1205, "{error}"),
        other => panic!("not a lock wait timeout: {other}"),
    }
    // One wait of the procedure's innodb_lock_wait_timeout (1 s): a lock wait timeout is
    // not tried again, which would take 3 s.
    assert!(
        Duration::from_millis(950) <= took && took < Duration::from_millis(2500),
        "gave up after {took:?}"
    );
    holder.release().await;
    assert_eq!(stock_and_orders(voucher).await, (3, BTreeMap::new()));
    // The row free, the same batch commits.
    assert_eq!(
        commit(voucher, &batch).await,
        batch.map(|_| Verdict::Ordered)
    );
    assert_eq!(
        stock_and_orders(voucher).await,
        (1, batch.into_iter().collect())
    );
}

#[tokio::test]
async fn an_order_of_the_buyer_committed_meanwhile_makes_a_duplicate_not_an_error() {
    let (voucher, theirs, _, verdicts) = commit_meeting_an_open_order(true).await;
    assert_eq!(verdicts, [Verdict::Duplicate(theirs, 1)]);
    // That order came without taking a unit; the batch took none either.
    assert_eq!(
        stock_and_orders(voucher).await,
        (1, BTreeMap::from([(theirs, user(42))]))
    );
}

#[tokio::test]
async fn an_order_of_the_buyer_rolled_back_meanwhile_leaves_the_batch_its_order() {
    let (voucher, _, ours, verdicts) = commit_meeting_an_open_order(false).await;
    assert_eq!(verdicts, [Verdict::Ordered]);
    assert_eq!(
        stock_and_orders(voucher).await,
        (0, BTreeMap::from([(ours, user(42))]))
    );
}

// ---- seckill_create_voucher ----

#[tokio::test]
async fn a_creation_names_the_procedure_s_parameters_in_their_order() {
    let mut conn = connect().await.unwrap();
    let names: Vec<String> = conn
        .query(
            "SELECT PARAMETER_NAME FROM information_schema.PARAMETERS \
             WHERE SPECIFIC_SCHEMA = DATABASE() AND SPECIFIC_NAME = 'seckill_create_voucher' \
             ORDER BY ORDINAL_POSITION",
        )
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    let expected: Vec<String> = sql::CREATE_VOUCHER_PARAMETERS
        .iter()
        .map(|name| format!("p_{name}"))
        .collect();
    assert_eq!(names, expected);
}

#[tokio::test]
async fn creating_a_voucher_writes_both_rows_and_deleting_removes_both() {
    let voucher = create_voucher(7).await;
    let mut conn = connect().await.unwrap();
    let row: Option<(String, u32, u32)> = conn
        .exec_first(
            "SELECT v.title, s.initial_stock, s.stock FROM tb_voucher v \
             JOIN tb_seckill_voucher s ON s.voucher_id = v.id WHERE v.id = ?",
            (voucher.raw(),),
        )
        .await
        .unwrap();
    assert_eq!(row, Some(("sql test".into(), 7, 7)));
    conn.exec_drop(sql::DELETE_VOUCHER, (voucher.raw(),))
        .await
        .unwrap();
    assert_none_left(
        conn,
        "tb_seckill_voucher WHERE voucher_id = ?",
        voucher.raw(),
    )
    .await;
}

/// Creations naming ids at once lock the end of the ids, then insert there, and deadlock:
/// the victim writes nothing and returns no row, as for ids taken (its caller chooses
/// again), rather than failing the admin's request.
#[tokio::test]
async fn creations_naming_ids_at_once_take_them_or_choose_again_never_fail() {
    let mut conn = connect().await.unwrap();
    let highest: u64 = conn
        .exec_first(sql::HIGHEST_VOUCHER, ())
        .await
        .unwrap()
        .unwrap();
    let creations: Vec<_> = (0..8u64)
        .map(|k| {
            tokio::spawn(async move {
                let mut conn = connect().await.unwrap();
                // Far above the creations of tests running beside this one, each its own ids.
                let first = highest + 1_000 + 10 * k;
                let ids = serde_json::to_string(&[first, first + 1]).unwrap();
                let rows: Result<Vec<(u64, u32, i64)>, _> = conn
                    .exec(
                        sql::CREATE_VOUCHER,
                        (
                            "at once",
                            "",
                            2u32,
                            "2030-01-01 00:00:00",
                            "2030-01-02 00:00:00",
                            900u32,
                            2u32,
                            0u32,
                            ids,
                            1u32,
                            None::<String>,
                        ),
                    )
                    .await;
                (first, rows)
            })
        })
        .collect();
    for creation in creations {
        let (first, rows) = creation.await.unwrap();
        let rows: Vec<(u64, u32)> = rows
            .unwrap_or_else(|error| panic!("ids from {first}: {error}"))
            .into_iter()
            .map(|(id, share, _)| (id, share))
            .collect();
        assert!(
            rows.is_empty() || rows == [(first, 1), (first + 1, 1)],
            "ids from {first}: {rows:?}"
        );
    }
}

/// A Redis Cluster's client names the buckets' ids (src/actions/vouchers.rs `insert`): free ones
/// are taken as given, gaps and all; ids not above every voucher's write nothing.
#[tokio::test]
async fn a_sale_created_under_ids_it_names_takes_them_only_above_every_voucher_s() {
    let mut conn = connect().await.unwrap();
    let create = |title: &'static str, ids: Vec<u64>| {
        let ids = serde_json::to_string(&ids).unwrap();
        (
            title,
            "",
            10u32,
            "2030-01-01 00:00:00",
            "2030-01-02 00:00:00",
            900u32,
            3u32,
            0u32,
            ids,
            1u32,
            None::<String>,
        )
    };
    let highest: u64 = conn
        .exec_first(sql::HIGHEST_VOUCHER, ())
        .await
        .unwrap()
        .unwrap();
    // Far enough above that the creations of tests running beside this one stay below.
    let first = highest + 100;
    let ids = vec![first, first + 2, first + 7];
    let rows: Vec<(u64, u32, i64)> = conn
        .exec(sql::CREATE_VOUCHER, create("placed", ids.clone()))
        .await
        .unwrap();
    let created = rows[0].2;
    assert_eq!(
        rows,
        [
            (ids[0], 4, created),
            (ids[1], 3, created),
            (ids[2], 3, created)
        ]
    );
    let sale: Vec<u64> = conn
        .exec(
            "SELECT sale_id FROM tb_seckill_voucher WHERE voucher_id IN (?, ?, ?)",
            (ids[0], ids[1], ids[2]),
        )
        .await
        .unwrap();
    assert_eq!(sale, [first; 3]);

    let taken = vec![first + 1, first + 3, first + 200];
    let rows: Vec<(u64, u32, i64)> = conn
        .exec(sql::CREATE_VOUCHER, create("taken", taken))
        .await
        .unwrap();
    assert_eq!(rows, []);
    let written: u64 = conn
        .exec_first(
            "SELECT COUNT(*) FROM tb_voucher WHERE id IN (?, ?)",
            (first + 1, first + 200),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(written, 0);
    for id in ids {
        conn.exec_drop(sql::DELETE_VOUCHER, (id,)).await.unwrap();
    }
    conn.disconnect().await.unwrap();
}

#[tokio::test]
async fn an_invalid_creation_leaves_nothing_behind() {
    let mut conn = connect().await.unwrap();
    let title = format!("bad {}", order_id(create_voucher(1).await, 0));
    let result = conn
        .exec_drop(
            sql::CREATE_VOUCHER,
            (
                &title,
                "",
                5u32,
                "2020-01-01 00:00:00",
                "2020-02-30 00:00:00",
                900u32,
                1u32,
                0u32,
                None::<String>,
                1u32,
                None::<String>,
            ),
        )
        .await;
    assert!(result.is_err());
    assert_none_left(conn, "tb_voucher WHERE title = ?", title.as_str()).await;
}

// ---- seckill_expire_due ----

#[tokio::test]
async fn an_expiry_whose_order_was_settled_while_it_waited_leaves_the_stock_as_it_is() {
    let voucher = create_voucher(3).await;
    let order = purchase(voucher, 1);
    assert_eq!(commit(voucher, &[order]).await, [Verdict::Ordered]);
    mysql_exec(
        "UPDATE tb_voucher_order SET expire_time = UTC_TIMESTAMP() - INTERVAL 5 SECOND \
         WHERE id = ?",
        (order.0.raw(),),
    )
    .await;
    // Another request settles the order past its deadline (a sweep on another host
    // expiring it, as the feed's reads do with no lease), holding the stock row.
    let (mut other, _): (_, Option<u64>) = open_transaction(
        "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ? FOR UPDATE",
        (voucher.raw(),),
    )
    .await;
    other
        .exec_drop(
            "UPDATE tb_voucher_order SET status = ? WHERE id = ?",
            (sql::Status::Expired as u8, order.0.raw()),
        )
        .await
        .unwrap();
    // This expiry saw the order due, and waits for the row.
    let expiring = tokio::spawn(scripts::expire_due(voucher, 256));
    until_blocked().await;
    end_transaction(other, "COMMIT").await;
    // It finds nothing left to expire, and gives nothing back.
    assert_eq!(expiring.await.unwrap(), Ok((0, None)));
    assert_eq!(stock_and_orders(voucher).await.0, 2);
}

// ---- seckill_expire_overdue ----

/// Sets the order's status, and its deadline `overdue_s` seconds before the year 1001:
/// older than any other test's (an order inserted with no deadline has 1970's).
async fn overdue_since_1001(order: OrderId, overdue_s: u64, status: sql::Status) {
    mysql_exec(
        "UPDATE tb_voucher_order SET status = ?, \
         expire_time = '1001-01-01' - INTERVAL ? SECOND WHERE id = ?",
        (status as u8, overdue_s, order.raw()),
    )
    .await;
}

/// The orders' statuses in MySQL.
async fn statuses(orders: &[OrderId]) -> Vec<u8> {
    let mut read = Vec::new();
    for order in orders {
        let status: u8 = mysql_first(
            "SELECT status FROM tb_voucher_order WHERE id = ?",
            (order.raw(),),
        )
        .await
        .unwrap();
        read.push(status);
    }
    read
}

/// The `order.expired` events MySQL holds of the order.
async fn expiry_events(order: OrderId) -> u64 {
    mysql_first(
        "SELECT COUNT(*) FROM tb_order_event WHERE order_id = ? AND type = ?",
        (order.raw(), sql::EventType::Expired as u8),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn the_feed_s_expiries_take_the_longest_and_the_most_recently_overdue_orders_of_all_sales() {
    // MySQL's clock set to 2000 for the expiries: no order of the tests beside this one is
    // due then but those left with 1970's deadline, and this test's are older still.
    let at = 946_684_800;
    // Sale a's orders fell due first and third, b's second; c's first is paid.
    let (a, b, c, d) = (
        create_voucher(3).await,
        create_voucher(2).await,
        create_voucher(3).await,
        create_voucher(1).await,
    );
    let [a1, a2] = [purchase(a, 1), purchase(a, 2)];
    let [b1, c1, c2, d1] = [
        purchase(b, 1),
        purchase(c, 1),
        purchase(c, 2),
        purchase(d, 1),
    ];
    assert_eq!(commit(a, &[a1, a2]).await, [Verdict::Ordered; 2]);
    assert_eq!(commit(b, &[b1]).await, [Verdict::Ordered]);
    assert_eq!(commit(c, &[c1, c2]).await, [Verdict::Ordered; 2]);
    assert_eq!(commit(d, &[d1]).await, [Verdict::Ordered]);
    overdue_since_1001(a1.0, 40, sql::Status::Unpaid).await;
    overdue_since_1001(b1.0, 30, sql::Status::Unpaid).await;
    overdue_since_1001(a2.0, 20, sql::Status::Unpaid).await;
    overdue_since_1001(c2.0, 10, sql::Status::Unpaid).await;
    overdue_since_1001(c1.0, 50, sql::Status::Paid).await;
    // d's fell due a second before 2000: the most recently overdue then.
    mysql_exec(
        "UPDATE tb_voucher_order SET expire_time = '1999-12-31 23:59:59' WHERE id = ?",
        (d1.0.raw(),),
    )
    .await;
    let orders = [a1.0, b1.0, a2.0, c1.0, c2.0, d1.0];
    let (unpaid, paid, expired) = (
        sql::Status::Unpaid as u8,
        sql::Status::Paid as u8,
        sql::Status::Expired as u8,
    );

    // Two of the oldest and one of the newest: of three sales, each bucket's units back,
    // the newest sales first.
    let taken = scripts::expire_overdue_at(at, 2, 1).await.unwrap();
    let mut newest_first = vec![a, b, d];
    newest_first.sort_by(|x, y| y.cmp(x));
    assert_eq!(taken, newest_first);
    assert_eq!(
        statuses(&orders).await,
        [expired, expired, unpaid, paid, unpaid, expired]
    );
    for (sale, stock) in [(a, 2), (b, 2), (d, 1)] {
        assert_eq!(stock_and_orders(sale).await.0, stock, "sale {sale}");
    }

    // The next two: a's other and c's, while another transaction holds c's stock row (a
    // payment, a group commit, a lock that is stuck), and b's (which has none due): c's
    // waits for the next call, and a's goes now, with no wait.
    let locks = [RowLock::hold(c).await, RowLock::hold(b).await];
    let started = Instant::now();
    let taken = scripts::expire_overdue_at(at, 2, 0).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "it waited for a row"
    );
    assert_eq!(taken, [a]);
    for lock in locks {
        lock.release().await;
    }
    assert_eq!(scripts::expire_overdue_at(at, 1, 0).await.unwrap(), [c]);
    assert_eq!(
        statuses(&orders).await,
        [expired, expired, expired, paid, expired, expired]
    );
    for (sale, stock) in [(a, 3), (c, 2)] {
        assert_eq!(stock_and_orders(sale).await.0, stock, "sale {sale}");
    }
    for order in [a1.0, b1.0, a2.0, c2.0, d1.0] {
        assert_eq!(expiry_events(order).await, 1, "order {order}");
    }
    assert_eq!(expiry_events(c1.0).await, 0);

    // An order of a bucket with no stock row (its sale deleted) expires too, first in
    // line, and no sale is named to give its unit back to.
    let gone = fresh_voucher_id();
    let orphan = OrderId::from_raw((1 << 63) | gone);
    mysql_exec(
        "INSERT INTO tb_voucher_order \
         (id, user_id, voucher_id, sale_id, status, create_time, expire_time) \
         VALUES (?, 1, ?, ?, ?, UTC_TIMESTAMP(), '1001-01-01' - INTERVAL 60 SECOND)",
        (orphan.raw(), gone, gone, sql::Status::Unpaid as u8),
    )
    .await;
    assert_eq!(scripts::expire_overdue_at(at, 1, 0).await.unwrap(), []);
    assert_eq!(statuses(&[orphan]).await, [expired]);
    assert_eq!(expiry_events(orphan).await, 1);
}

// ---- seckill_settle_order ----

#[tokio::test]
async fn a_cancel_of_someone_else_s_order_never_waits_for_the_stock_row() {
    let voucher = create_voucher(2).await;
    let theirs = purchase(voucher, 1);
    assert_eq!(commit(voucher, &[theirs]).await, [Verdict::Ordered]);
    // A drainer holds the stock row; a buyer names her neighbour's order and a made-up one.
    let lock = RowLock::hold(voucher).await;
    // Had either call met the held row, it would fail with a lock wait timeout (1 s).
    let mut conn = connect().await.unwrap();
    for order in [theirs.0, order_id(voucher, 99)] {
        let settled =
            scripts::settle_order(&mut conn, order, Some(user(2)), sql::Status::Cancelled).await;
        assert_eq!(settled, Ok(None), "order {order}");
    }
    lock.release().await;
    // Her neighbour's order is as it was.
    let settled = scripts::settle_order(&mut conn, theirs.0, None, sql::Status::Paid).await;
    assert_eq!(
        settled.map(|s| s.map(|(status, changed, _)| (status, changed))),
        Ok(Some((sql::Status::Paid, true)))
    );
    conn.disconnect().await.unwrap();
}

/// The last place given in the feed so far.
async fn last_place() -> u64 {
    let sql = "SELECT COALESCE(MAX(seq), 0) FROM tb_order_event";
    mysql_first(sql, ()).await.unwrap()
}

/// The places of these orders' events in the feed after `after`, read to its end as a
/// consumer does (other suites' events may wait to be placed before them), with the last
/// place read.
async fn placed(after: u64, orders: &[OrderId]) -> (Vec<(u64, OrderId)>, u64) {
    let (mut ours, mut cursor) = (Vec::new(), after);
    loop {
        let page = feed_page(cursor, 1000).await;
        let Some(last) = page.last() else {
            return (ours, cursor);
        };
        cursor = last.id;
        ours.extend(
            page.iter()
                .filter(|event| orders.contains(&event.order_id))
                .map(|event| (event.id, event.order_id)),
        );
    }
}

#[tokio::test]
async fn an_event_committed_late_is_placed_after_every_event_a_reader_has_passed() {
    // Two vouchers' writers share no lock: a transaction that wrote its event first (the
    // lower id) commits after another voucher's group commit. A read of the feed meanwhile
    // holds the committed one alone; the late one, once committed, is placed after it, so
    // a reader who kept her cursor reads it, once.
    let (slow, fast) = (create_voucher(1).await, create_voucher(1).await);
    let late = order_id(slow, 1);
    let start = last_place().await;
    let writer = uncommitted(
        "INSERT INTO tb_order_event (type, order_id, voucher_id, user_id, at) \
         VALUES (1, ?, ?, 1, UTC_TIMESTAMP())",
        (late.raw(), slow.raw()),
    )
    .await;
    assert_eq!(commit(fast, &[purchase(fast, 1)]).await, [Verdict::Ordered]);
    let early = order_id(fast, 1);

    let (first, cursor) = placed(start, &[late, early]).await;
    assert_eq!(
        first.iter().map(|(_, order)| *order).collect::<Vec<_>>(),
        [early]
    );
    end_transaction(writer, "COMMIT").await;
    let (second, _) = placed(cursor, &[late, early]).await;
    assert_eq!(
        second.iter().map(|(_, order)| *order).collect::<Vec<_>>(),
        [late]
    );
    assert!(second[0].0 > first[0].0, "{first:?} then {second:?}");

    // Its id is below the early one's: ids are not places.
    let mut conn = connect().await.unwrap();
    let ids: Vec<(u64, u64)> = conn
        .exec(
            "SELECT order_id, id FROM tb_order_event WHERE order_id IN (?, ?) ORDER BY id",
            (late.raw(), early.raw()),
        )
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    assert_eq!(
        ids.iter().map(|(order, _)| *order).collect::<Vec<_>>(),
        [late.raw(), early.raw()]
    );
}

#[tokio::test]
async fn many_vouchers_writing_while_readers_page_the_feed_each_read_every_event_once_in_order() {
    // Eight vouchers' group commits and cancellations at once, sharing no lock, while
    // three readers page the feed from where it ended: once the writers are done, each
    // reader has read every event of theirs exactly once, each order's creation before
    // its cancellation, and the places she read only grow.
    const VOUCHERS: u64 = 8;
    const BUYERS: u64 = 24;
    let start = last_place().await;
    let mut vouchers = Vec::new();
    for _ in 0..VOUCHERS {
        vouchers.push(create_voucher(BUYERS as u32).await);
    }
    let writing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let writing = writing.clone();
            tokio::spawn(async move {
                let (mut read, mut cursor) = (Vec::new(), start);
                loop {
                    let done = !writing.load(std::sync::atomic::Ordering::SeqCst);
                    let page = feed_page(cursor, 50).await;
                    if let Some(last) = page.last() {
                        cursor = last.id;
                    }
                    let empty = page.is_empty();
                    read.extend(page);
                    if done && empty {
                        return read;
                    }
                }
            })
        })
        .collect();
    let writers: Vec<_> = vouchers
        .iter()
        .map(|&voucher| {
            tokio::spawn(async move {
                let mut conn = connect().await.unwrap();
                let mut created = Vec::new();
                for n in 1..=BUYERS {
                    let (order, buyer) = purchase(voucher, n);
                    let committed = commit_batch_on(&mut conn, voucher, &[(order, buyer)])
                        .await
                        .unwrap();
                    assert_eq!(committed.verdicts, [Verdict::Ordered]);
                    let mut kinds = vec!["order.created"];
                    // Every third order is cancelled by its buyer right away.
                    if n % 3 == 0 {
                        kinds.push("order.cancelled");
                        let settled = scripts::settle_order(
                            &mut conn,
                            order,
                            Some(buyer),
                            sql::Status::Cancelled,
                        )
                        .await
                        .unwrap();
                        assert_eq!(settled, Some((sql::Status::Cancelled, true, voucher)));
                    }
                    created.push((order, kinds));
                }
                conn.disconnect().await.unwrap();
                created
            })
        })
        .collect();
    let mut written = HashMap::new();
    for writer in writers {
        written.extend(writer.await.unwrap());
    }
    writing.store(false, std::sync::atomic::Ordering::SeqCst);
    for reader in readers {
        let read = reader.await.unwrap();
        assert!(
            read.windows(2).all(|pair| pair[0].id < pair[1].id),
            "places read out of order"
        );
        let mut heard: HashMap<OrderId, Vec<&str>> = HashMap::new();
        for event in read
            .iter()
            .filter(|event| vouchers.contains(&event.voucher_id.first_bucket()))
        {
            heard.entry(event.order_id).or_default().push(event.kind);
        }
        assert_eq!(heard.len(), written.len());
        for (order, kinds) in &written {
            assert_eq!(heard.get(order), Some(kinds), "order {order}'s events");
        }
    }
}

// ---- a sale in buckets ----

#[tokio::test]
async fn a_sale_in_buckets_is_a_row_a_bucket_sharing_its_stock_and_terms() {
    let buckets = scripts::create_bucketed(10, 3, -60, 3600).await;
    let [first, second, third] = buckets.all() else {
        panic!("three buckets: {buckets:?}")
    };
    let mut stocks = Vec::new();
    for &bucket in buckets.all() {
        let found = scripts::lookup(bucket).await.unwrap();
        let terms = found.terms.expect("each bucket a voucher of its own");
        assert_eq!(terms.stock, terms.initial_stock);
        stocks.push(terms.stock);
        let expected = if bucket == *first {
            Spread::First(vec![*second, *third])
        } else {
            Spread::BucketOf(buckets.sale())
        };
        assert_eq!(found.spread, expected);
    }
    assert_eq!(
        stocks,
        [4, 3, 3],
        "as even as it goes, the first buckets one more"
    );
    let whole = create_voucher(2).await;
    assert_eq!(scripts::lookup(whole).await.unwrap().spread, Spread::Whole);
}

#[tokio::test]
async fn a_buyer_committed_by_two_buckets_holds_one_order_and_the_other_unit_stays() {
    let (a, b) = two_buckets(4).await;
    let (in_a, in_b) = (order_id(a, 1), order_id(b, 1));
    assert_eq!(commit(a, &[(in_a, user(42))]).await, [Verdict::Ordered]);
    // Written again, still her order; from the other bucket, that order, elsewhere.
    assert_eq!(commit(a, &[(in_a, user(42))]).await, [Verdict::Ordered]);
    assert_eq!(
        commit(b, &[(in_b, user(42)), purchase(b, 2)]).await,
        [Verdict::Elsewhere(in_a), Verdict::Ordered]
    );
    assert_eq!(
        stock_and_orders(a).await,
        (1, BTreeMap::from([(in_a, user(42))]))
    );
    assert_eq!(
        stock_and_orders(b).await,
        (1, BTreeMap::from([purchase(b, 2)]))
    );
}

#[tokio::test]
async fn a_buyer_s_dead_order_in_another_bucket_is_told_as_it_became_and_takes_no_unit() {
    let (a, b) = two_buckets(8).await;
    let (cancelled, expired) = (order_id(a, 1), order_id(a, 2));
    assert_eq!(
        commit(a, &[(cancelled, user(41)), (expired, user(42))]).await,
        [Verdict::Ordered, Verdict::Ordered]
    );
    let mut conn = connect().await.unwrap();
    let settled =
        scripts::settle_order(&mut conn, cancelled, Some(user(41)), sql::Status::Cancelled)
            .await
            .unwrap();
    assert_eq!(settled.map(|s| s.0), Some(sql::Status::Cancelled));
    conn.exec_drop(
        "UPDATE tb_voucher_order SET expire_time = UTC_TIMESTAMP() - INTERVAL 1 SECOND WHERE id = ?",
        (expired.raw(),),
    )
    .await
    .unwrap();
    conn.disconnect().await.unwrap();
    assert_eq!(scripts::expire_due(a, 10).await.unwrap().0, 1);
    // Each presses again at the other bucket: her order of the sale is dead, not held.
    assert_eq!(
        commit(b, &[(order_id(b, 1), user(41)), (order_id(b, 2), user(42))]).await,
        [Verdict::Cancelled(cancelled), Verdict::Expired(expired)]
    );
    assert_eq!(stock_and_orders(b).await, (4, BTreeMap::new()));
}

#[tokio::test]
async fn an_order_of_another_bucket_committed_again_here_is_that_bucket_s() {
    let (a, b) = two_buckets(4).await;
    let in_b = order_id(b, 1);
    assert_eq!(commit(b, &[(in_b, user(42))]).await, [Verdict::Ordered]);
    // A's heal hands MySQL the id of her order in B (her record at A names it): it is
    // B's order, not one of A's.
    assert_eq!(
        commit(a, &[(in_b, user(42))]).await,
        [Verdict::Elsewhere(in_b)]
    );
    assert_eq!(stock_and_orders(a).await, (2, BTreeMap::new()));
}

#[tokio::test]
async fn two_buckets_committing_one_buyer_at_once_give_her_one_order() {
    let (a, b) = two_buckets(64).await;
    // Buyers 9 to 16 pressed at both buckets (her bucket sold out for a moment, say), and
    // both buckets commit them at once: the later insert of each waits on the earlier,
    // fails on uk_user_sale once it commits, and its try again finds her order.
    let batch_a: Vec<_> = (1..=16).map(|u| purchase(a, u)).collect();
    let batch_b: Vec<_> = (9..=24).map(|u| purchase(b, u)).collect();
    let (ra, rb) = tokio::join!(commit_batch(a, &batch_a), commit_batch(b, &batch_b));
    let (ra, rb) = (ra.unwrap().verdicts, rb.unwrap().verdicts);
    for u in 1..=24 {
        let va = (u <= 16).then(|| ra[u as usize - 1]);
        let vb = (u >= 9).then(|| rb[u as usize - 9]);
        let one = match (va, vb) {
            (Some(Verdict::Ordered), None) | (None, Some(Verdict::Ordered)) => true,
            (Some(Verdict::Ordered), Some(Verdict::Elsewhere(held))) => held == order_id(a, u),
            (Some(Verdict::Elsewhere(held)), Some(Verdict::Ordered)) => held == order_id(b, u),
            _ => false,
        };
        assert!(one, "buyer {u}: {va:?} in a, {vb:?} in b");
    }
    let (stock_a, orders_a) = stock_and_orders(a).await;
    let (stock_b, orders_b) = stock_and_orders(b).await;
    assert_eq!(orders_a.len() + orders_b.len(), 24);
    assert_eq!(stock_a + stock_b, 64 - 24);
}

// ---- quantities ----

#[tokio::test]
async fn each_purchase_takes_all_its_units_or_none_and_gives_them_all_back() {
    let voucher = create_voucher(5).await;
    let id = |n| order_id(voucher, n);
    let batch = [
        (id(1), user(1), 3),
        (id(2), user(2), 3),
        (id(3), user(3), 2),
    ];
    let committed = commit_batch(voucher, &batch).await.unwrap();
    // Three of the two left after the first: refused whole, naming the two, and the
    // third's two fit; then none is left.
    assert_eq!(
        committed.verdicts,
        [
            Verdict::Ordered,
            Verdict::Short { left: 2 },
            Verdict::Ordered
        ]
    );
    assert_eq!(
        (
            committed.created,
            committed.ledger.orders,
            committed.ledger.stock
        ),
        (2, 2, 0)
    );
    // Written again, it changes nothing; the refused purchase now finds none left (the
    // two it was told of are the third's).
    let again = commit_batch(voucher, &batch).await.unwrap();
    assert_eq!(
        (again.verdicts, again.created),
        (
            vec![Verdict::Ordered, Verdict::SoldOut, Verdict::Ordered],
            0
        )
    );
    let none = commit_batch(voucher, &[(id(5), user(5), 1)]).await.unwrap();
    assert_eq!(none.verdicts, [Verdict::SoldOut]);
    // A buyer holding an order hears it with its units.
    let duplicate = commit_batch(voucher, &[(id(4), user(1), 1)]).await.unwrap();
    assert_eq!(duplicate.verdicts, [Verdict::Duplicate(id(1), 3)]);

    let units = |order: OrderId| async move {
        let mut conn = connect().await.unwrap();
        let units: u32 = conn
            .exec_first(
                "SELECT quantity FROM tb_voucher_order WHERE id = ?",
                (order.raw(),),
            )
            .await
            .unwrap()
            .unwrap();
        conn.disconnect().await.unwrap();
        units
    };
    assert_eq!((units(id(1)).await, units(id(3)).await), (3, 2));

    // A cancellation gives its three back; an expiry its two.
    let mut conn = connect().await.unwrap();
    let cancelled = scripts::settle_order(&mut conn, id(1), Some(user(1)), sql::Status::Cancelled)
        .await
        .unwrap();
    assert_eq!(cancelled, Some((sql::Status::Cancelled, true, voucher)));
    assert_eq!(stock_and_orders(voucher).await.0, 3);
    // An entry naming no units (a component from before quantities, still serving while
    // the migration runs) is one unit, as it was.
    let batch = format!(r#"[["{}", "6"]]"#, id(6));
    let rows: Vec<mysql_async::Row> = conn
        .exec(sql::COMMIT_BATCH, (voucher.raw(), batch))
        .await
        .unwrap();
    let verdicts: String = rows[0].get(0).unwrap();
    assert!(
        verdicts.starts_with(r#"[{"outcome":"ordered""#),
        "{verdicts}"
    );
    assert_eq!(
        (units(id(6)).await, stock_and_orders(voucher).await.0),
        (1, 2)
    );
    conn.exec_drop(
        "UPDATE tb_voucher_order SET expire_time = UTC_TIMESTAMP() - INTERVAL 1 SECOND \
         WHERE id = ?",
        (id(3).raw(),),
    )
    .await
    .unwrap();
    conn.disconnect().await.unwrap();
    assert_eq!(scripts::expire_due(voucher, 64).await.unwrap().0, 1);
    assert_eq!(stock_and_orders(voucher).await.0, 4);
    // Each return says its order's units, for Redis to give back whole.
    let returned: Vec<(ReturnKind, u32)> = scripts::returns_after(voucher, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|returned| (returned.kind, returned.units))
        .collect();
    let (user_1, user_3) = (UserId::from_raw(1), UserId::from_raw(3));
    assert_eq!(
        returned,
        [
            (
                ReturnKind::Cancelled {
                    order_id: id(1),
                    user: user_1
                },
                3
            ),
            (
                ReturnKind::Expired {
                    order_id: id(3),
                    user: user_3
                },
                2
            )
        ]
    );
}
