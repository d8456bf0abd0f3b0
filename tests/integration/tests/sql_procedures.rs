//! The stored procedures of `migrations/`, called against the real MariaDB the way Spin
//! calls them: one prepared `CALL` on a fresh connection per purchase.

use mysql_async::prelude::Queryable;
use mysql_async::Pool;
use seckill_tests::backends::mysql;
use seckill_tests::scripts;

/// A voucher on sale since a minute ago, for an hour.
async fn create_voucher(stock: u32) -> u64 {
    scripts::create_voucher(stock, -60, 3600).await
}

async fn purchase(order_id: u64, user_id: u64, voucher_id: u64) -> (String, Option<u64>) {
    scripts::purchase(order_id, user_id, voucher_id)
        .await
        .unwrap()
}

async fn stock_and_orders(pool: &Pool, voucher_id: u64) -> (u32, u64) {
    let mut conn = pool.get_conn().await.unwrap();
    let stock: u32 = conn
        .exec_first(
            "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?",
            (voucher_id,),
        )
        .await
        .unwrap()
        .unwrap();
    let orders: u64 = conn
        .exec_first(
            "SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?",
            (voucher_id,),
        )
        .await
        .unwrap()
        .unwrap();
    (stock, orders)
}

/// Order ids unique to this voucher, so tests never collide with each other.
fn order_id(voucher_id: u64, n: u64) -> u64 {
    (voucher_id << 20) | n
}

#[tokio::test]
async fn concurrent_buyers_never_oversell() {
    let pool = mysql();
    let voucher = create_voucher(10).await;
    let tasks: Vec<_> = (1..=60u64)
        .map(|user| tokio::spawn(purchase(order_id(voucher, user), user, voucher)))
        .collect();
    let mut ordered = 0;
    for task in tasks {
        match task.await.unwrap() {
            (outcome, Some(_)) if outcome == "ordered" => ordered += 1,
            (outcome, None) if outcome == "sold_out" => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(ordered, 10);
    assert_eq!(stock_and_orders(&pool, voucher).await, (0, 10));
}

#[tokio::test]
async fn one_buyer_gets_one_order_however_many_times_they_call() {
    let pool = mysql();
    let voucher = create_voucher(10).await;
    let tasks: Vec<_> = (1..=20u64)
        .map(|n| tokio::spawn(purchase(order_id(voucher, n), 42, voucher)))
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    let winners: Vec<_> = outcomes.iter().filter(|(o, _)| o == "ordered").collect();
    assert_eq!(winners.len(), 1);
    let winner = winners[0].1;
    for (outcome, id) in &outcomes {
        assert!(outcome == "ordered" || (outcome == "already_ordered" && *id == winner));
    }
    assert_eq!(stock_and_orders(&pool, voucher).await, (9, 1));
}

#[tokio::test]
async fn a_colliding_order_id_changes_nothing() {
    let pool = mysql();
    let voucher = create_voucher(5).await;
    let id = order_id(voucher, 1);
    assert_eq!(purchase(id, 1, voucher).await, ("ordered".into(), Some(id)));
    assert_eq!(purchase(id, 2, voucher).await, ("id_taken".into(), None));
    assert_eq!(stock_and_orders(&pool, voucher).await, (4, 1));
}

#[tokio::test]
async fn sold_out_rolls_the_order_row_back() {
    let pool = mysql();
    let voucher = create_voucher(1).await;
    assert_eq!(
        purchase(order_id(voucher, 1), 1, voucher).await.0,
        "ordered"
    );
    assert_eq!(
        purchase(order_id(voucher, 2), 2, voucher).await,
        ("sold_out".into(), None)
    );
    assert_eq!(stock_and_orders(&pool, voucher).await, (0, 1));
}

#[tokio::test]
async fn creating_a_voucher_writes_both_rows_and_deleting_removes_both() {
    let pool = mysql();
    let voucher = create_voucher(7).await;
    let mut conn = pool.get_conn().await.unwrap();
    let row: Option<(String, u32, u32)> = conn
        .exec_first(
            "SELECT v.title, s.initial_stock, s.stock FROM tb_voucher v \
             JOIN tb_seckill_voucher s ON s.voucher_id = v.id WHERE v.id = ?",
            (voucher,),
        )
        .await
        .unwrap();
    assert_eq!(row, Some(("sql test".into(), 7, 7)));
    conn.exec_drop("DELETE FROM tb_voucher WHERE id = ?", (voucher,))
        .await
        .unwrap();
    let left: u64 = conn
        .exec_first(
            "SELECT COUNT(*) FROM tb_seckill_voucher WHERE voucher_id = ?",
            (voucher,),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn an_invalid_creation_leaves_nothing_behind() {
    let pool = mysql();
    let mut conn = pool.get_conn().await.unwrap();
    let title = format!("bad {}", order_id(create_voucher(1).await, 0));
    let result = conn
        .exec_drop(
            "CALL seckill_create_voucher(?, ?, ?, ?, ?)",
            (
                &title,
                "",
                5u32,
                "2020-01-01 00:00:00",
                "2020-02-30 00:00:00",
            ),
        )
        .await;
    assert!(result.is_err());
    let left: u64 = conn
        .exec_first("SELECT COUNT(*) FROM tb_voucher WHERE title = ?", (&title,))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn attempts_of_one_buyer_that_deadlock_are_retried_not_failed() {
    // Three attempts of one buyer wait on the buyer's unique key held by an uncommitted
    // insert; when it rolls back, InnoDB lets them all read the gap and then deadlocks
    // their inserts (ERROR 1213). Each must still get an answer: one order, two repeats.
    let voucher = create_voucher(1).await;
    let mut blocker = mysql_async::Conn::from_url(seckill_tests::backends::MYSQL_URL)
        .await
        .unwrap();
    blocker.query_drop("START TRANSACTION").await.unwrap();
    blocker
        .exec_drop(
            "INSERT INTO tb_voucher_order (id, user_id, voucher_id, status, create_time) \
             VALUES (?, 42, ?, 1, UTC_TIMESTAMP())",
            (order_id(voucher, 100), voucher),
        )
        .await
        .unwrap();
    let attempts: Vec<_> = (1..=3u64)
        .map(|n| tokio::spawn(scripts::purchase(order_id(voucher, n), 42, voucher)))
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    blocker.query_drop("ROLLBACK").await.unwrap();
    let mut outcomes = Vec::new();
    for attempt in attempts {
        match attempt.await.unwrap() {
            Ok((outcome, _)) => outcomes.push(outcome),
            Err(error) => panic!("an attempt failed instead of being retried: {error}"),
        }
    }
    outcomes.sort();
    assert_eq!(outcomes, ["already_ordered", "already_ordered", "ordered"]);
    assert_eq!(stock_and_orders(&mysql(), voucher).await, (0, 1));
}
