//! A MySQL failover on this machine (issue 40): orders committed through a proxy in front
//! of a private MariaDB primary, its GTID replica made to lag, then the primary killed and
//! the replica promoted behind the same proxy (`seckill_tests::mysql_pair`).
//!
//! Asynchronous replication loses exactly the orders acknowledged while the replica lagged.
//! Semi-synchronous replication (AFTER_SYNC) answers none of them until the replica has
//! them, so it loses no acknowledged order; the one it was holding dies with the primary,
//! unanswered. Spin is not involved: the orders are the group commit's own `CALL`s.
//! Each test prints a line (`cargo test -p seckill-tests --test mysql_failover -- --nocapture`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use seckill_core::sql;
use seckill_core::verdict::Verdict;
use seckill_core::{OrderId, UserId, VoucherId};
use seckill_tests::mysql_pair::{MysqlPair, Replication};
use seckill_tests::scripts::commit_batch_on;
use tokio::task::JoinHandle;

/// Orders committed while the replica receives, and then tried while it lags.
const BEFORE: u64 = 3;
const WHILE_LAGGING: u64 = 3;
/// How long a semi-sync commit is watched not being answered.
const HELD: Duration = Duration::from_millis(1500);
/// Bound on anything that should be quick.
const QUICK: Duration = Duration::from_secs(10);

async fn create_voucher(pair: &MysqlPair, stock: u32) -> VoucherId {
    let at = |offset: i64| {
        (chrono::Utc::now() + chrono::Duration::seconds(offset))
            .format("%Y-%m-%d %H:%M:%S")
            .to_string()
    };
    let mut conn = Conn::from_url(pair.url()).await.unwrap();
    let id: Option<u64> = conn
        .exec_first(
            sql::CREATE_VOUCHER,
            ("failover", "", stock, at(-60), at(3600), 900),
        )
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
    VoucherId::from_raw(id.unwrap())
}

/// Order `n` (by buyer `n`) committed as the drainer commits a batch of one, on a
/// connection of its own through `url`.
async fn order(url: &str, voucher: VoucherId, n: u64) -> Result<(), mysql_async::Error> {
    let mut conn = Conn::from_url(url).await?;
    let batch = [(OrderId::from_raw(n), UserId::from_raw(n))];
    let committed = commit_batch_on(&mut conn, voucher, &batch).await?;
    assert_eq!(committed.verdicts, [Verdict::Ordered], "order {n}");
    conn.disconnect().await?;
    Ok(())
}

/// Orders `first..first + count`, one after the other, in a task; each acknowledged one is
/// added to `acknowledged`. Stops at the first error.
fn orders_in_task(
    pair: &MysqlPair,
    voucher: VoucherId,
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

/// The voucher's orders as the primary behind the proxy holds them.
async fn orders_present(pair: &MysqlPair, voucher: VoucherId) -> BTreeSet<u64> {
    let mut conn = Conn::from_url(pair.url()).await.unwrap();
    let ids: Vec<u64> = conn
        .exec(
            "SELECT id FROM tb_voucher_order WHERE voucher_id = ?",
            (voucher.raw(),),
        )
        .await
        .unwrap();
    conn.disconnect().await.unwrap();
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
