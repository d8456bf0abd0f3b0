//! A voucher id MySQL hands out again (it lost the voucher that had it: restored from an
//! older backup, or a failover that lost its creation) while Redis still holds the lost
//! voucher's sale: the new voucher's sale is its own, end to end under real Spin.

use std::time::Duration;

use chrono::{DateTime, Utc};
use mysql_async::prelude::Queryable;
use reqwest::{Method, StatusCode};

use seckill_core::sale::AUDIT_MS;
use seckill_tests::drivers::app::App;
use seckill_tests::drivers::scripts;

/// MySQL loses the vouchers (a sale's buckets, the sale first) and everything of them, and
/// the sale's id is the next one handed out (as after a restore from a backup taken before
/// its creation).
pub(super) async fn mysql_loses(vouchers: &[u64]) {
    let mut db = scripts::connect().await.unwrap();
    for statement in [
        "DELETE FROM tb_order_event WHERE voucher_id = ?",
        "DELETE FROM tb_voucher_order WHERE voucher_id = ?",
        "DELETE FROM tb_voucher WHERE id = ?",
    ] {
        for &voucher in vouchers {
            db.exec_drop(statement, (voucher,)).await.unwrap();
        }
    }
    // Below the highest id the server sets MAX(id) + 1: the id comes back when the sale's
    // were the last ones handed out.
    db.query_drop(format!(
        "ALTER TABLE tb_voucher AUTO_INCREMENT = {}",
        vouchers[0]
    ))
    .await
    .unwrap();
    db.disconnect().await.unwrap();
}

#[tokio::test]
async fn a_voucher_given_a_lost_voucher_s_id_sells_as_its_own_sale() {
    let app = App::start().await;
    let buyer = 2001;
    // Other suites may create a voucher in between, which keeps the id from coming back:
    // the scenario is tried again then.
    let (a, a_order, b) = 'tries: {
        for _ in 0..5 {
            let a = app.voucher(5, -60, 1800).await;
            let bought = app.buy(a, buyer).await;
            assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
            let a_order = bought.order_id().unwrap();
            mysql_loses(&[a]).await;
            let b = app.voucher(5, -60, 7200).await;
            if b == a {
                break 'tries (a, a_order, b);
            }
        }
        panic!("MySQL never handed a lost voucher's id out again");
    };

    // B's page shows B's window, not A's earlier end.
    let shown = app
        .call(Method::GET, &format!("/vouchers/{b}"), None, None)
        .await;
    assert_eq!(shown.status, StatusCode::OK);
    let end: DateTime<Utc> = shown.body["end_time"].as_str().unwrap().parse().unwrap();
    let b_end = Utc::now() + chrono::Duration::seconds(7200);
    assert!(
        (b_end - end).num_seconds().abs() < 60,
        "B ends at {end}, about {b_end} (A ended 90 minutes earlier): {:?}",
        shown.body
    );
    assert_eq!(shown.body["remaining"], 5);
    assert_eq!(shown.body["status"], "live");

    // A's buyer buys B: a new order, not A's.
    let bought = app.buy(b, buyer).await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    let b_order = bought.order_id().unwrap();
    assert_ne!(b_order, a_order);

    // Past an audit (a press sweeps and audits every AUDIT_MS): MySQL holds B's order
    // alone under B, and A's order nowhere.
    tokio::time::sleep(Duration::from_millis(AUDIT_MS as u64 + 1_000)).await;
    assert_eq!(app.buy(b, 2002).await.status, StatusCode::CREATED);
    assert_eq!(app.buy(b, buyer).await.error(), "already_ordered");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut db = scripts::connect().await.unwrap();
    let orders: Vec<(u64, u64)> = db
        .exec(
            "SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = ? OR id = ? ORDER BY user_id",
            (b, a_order),
        )
        .await
        .unwrap();
    assert_eq!(
        orders.len(),
        2,
        "{orders:?} (A was {a}, its order {a_order})"
    );
    assert_eq!(orders[0], (b_order, buyer));
    assert_eq!(orders[1].1, 2002);
    let stock: Option<u64> = db
        .exec_first(
            "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?",
            (b,),
        )
        .await
        .unwrap();
    assert_eq!(stock, Some(3));
    db.disconnect().await.unwrap();
}
