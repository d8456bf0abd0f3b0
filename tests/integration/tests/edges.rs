//! The sale's edges under real Spin: a sale that ended long ago, made-up ids, reads with
//! Redis down. MySQL connections are counted by a proxy in front of MySQL.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use mysql_async::prelude::Queryable;
use redis::AsyncCommands;
use reqwest::{Method, StatusCode};

use seckill_core::sale::Keys;
use seckill_core::VoucherId;
use seckill_tests::app::{buyer_token, App, ADMIN_TOKEN};
use seckill_tests::backends::redis;
use seckill_tests::faults::{backend_env, free_port, Manifest};
use seckill_tests::proxy::Proxy;
use seckill_tests::scripts;

async fn press(app: &App, voucher: u64, user: u64) -> (StatusCode, String) {
    let answer = app.buy(voucher, user).await;
    (answer.status, answer.error().to_string())
}

#[tokio::test]
async fn a_sale_that_ended_long_ago_answers_ended_and_its_buyers_their_orders() {
    let app = App::start().await;
    let voucher = app.voucher(5, -30 * 86_400, -20 * 86_400).await;
    let ended = (StatusCode::CONFLICT, "ended".to_string());
    assert_eq!(press(&app, voucher, 1).await, ended);
    let shown = app
        .call(Method::GET, &format!("/vouchers/{voucher}"), None, None)
        .await;
    assert_eq!(shown.body["status"], "ended");

    // A buyer MySQL holds an order for, loaded by a sync, still hears her order.
    let order_id = (1u64 << 40) + voucher;
    let mut db = scripts::connect().await.unwrap();
    db.exec_drop(
        "INSERT INTO tb_voucher_order (id, user_id, voucher_id, status, create_time) \
         VALUES (?, 2, ?, 1, UTC_TIMESTAMP())",
        (order_id, voucher),
    )
    .await
    .unwrap();
    db.exec_drop(
        "UPDATE tb_seckill_voucher SET stock = stock - 1, orders = orders + 1 WHERE voucher_id = ?",
        (voucher,),
    )
    .await
    .unwrap();
    let synced = app
        .call(
            Method::POST,
            &format!("/vouchers/{voucher}/sync"),
            Some(ADMIN_TOKEN),
            None,
        )
        .await;
    assert_eq!(synced.status, StatusCode::OK, "{:?}", synced.body);
    let hers = app.buy(voucher, 2).await;
    assert_eq!(hers.status, StatusCode::CONFLICT);
    assert_eq!(hers.order_id(), Some(order_id));
    assert_eq!(press(&app, voucher, 3).await, ended);

    // Once Redis let the sale's keys expire, the sale comes back ended.
    let keys = Keys::new(VoucherId::from_raw(voucher));
    let _: () = redis()
        .await
        .del(&[keys.voucher(), keys.buyers(), keys.metrics(), keys.queue()])
        .await
        .unwrap();
    let mut answers = Vec::new();
    for user in 4..8 {
        answers.push(press(&app, voucher, user).await);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    assert!(answers.contains(&ended), "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|answer| *answer == ended || answer.1 == "unavailable"),
        "{answers:?}"
    );
    assert_eq!(press(&app, voucher, 9).await, ended, "restored");
    let shown = app
        .call(Method::GET, &format!("/vouchers/{voucher}"), None, None)
        .await;
    assert_eq!(shown.body["status"], "ended");
}

#[tokio::test]
async fn a_live_sale_redis_lost_is_named_stale_until_the_sync() {
    let app = App::start().await;
    let voucher = app.live_voucher(5).await;
    let first = app.buy(voucher, 1).await;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    // A failover to an empty replica: Redis holds nothing of the sale.
    let keys = Keys::new(VoucherId::from_raw(voucher));
    let _: () = redis()
        .await
        .del(&[keys.voucher(), keys.buyers(), keys.queue(), keys.metrics()])
        .await
        .unwrap();
    let unavailable = (StatusCode::SERVICE_UNAVAILABLE, "unavailable".to_string());
    assert_eq!(press(&app, voucher, 2).await, unavailable);
    let stale = |health: &serde_json::Value| {
        health["stale_vouchers"]
            .as_array()
            .is_some_and(|ids| ids.contains(&serde_json::json!(voucher)))
    };
    let health = app.call(Method::GET, "/health", None, None).await;
    assert!(stale(&health.body), "{health:?}");

    let path = format!("/vouchers/{voucher}/sync");
    let synced = app.call(Method::POST, &path, Some(ADMIN_TOKEN), None).await;
    assert_eq!(synced.status, StatusCode::OK, "{synced:?}");
    let health = app.call(Method::GET, "/health", None, None).await;
    assert!(!stale(&health.body), "{health:?}");
    assert_eq!(press(&app, voucher, 2).await.0, StatusCode::CREATED);
    let again = app.buy(voucher, 1).await;
    assert_eq!(again.error(), "already_ordered", "{again:?}");
    assert_eq!(again.order_id(), first.order_id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn made_up_ids_are_404_without_mysql() {
    let proxy = Proxy::start("127.0.0.1:3306".parse::<SocketAddr>().unwrap()).await;
    let manifest = Manifest::with_absolute_paths();
    let app = App::start_with(manifest.path(), backend_env(6379, proxy.port())).await;
    // Redis learns the highest id from a creation.
    let highest = app.live_voucher(1).await;
    let stats = proxy.stats();
    let before = stats.forwarded.load(Ordering::SeqCst);
    let started = Instant::now();
    let buyer = buyer_token(7);
    for i in 1..=150 {
        let id = highest + i * 1_000_003;
        let bought = app
            .call(
                Method::POST,
                &format!("/vouchers/{id}/orders"),
                Some(&buyer),
                None,
            )
            .await;
        assert_eq!(bought.status, StatusCode::NOT_FOUND, "buying {id}");
        let read = app
            .call(Method::GET, &format!("/vouchers/{id}"), None, None)
            .await;
        assert_eq!(read.status, StatusCode::NOT_FOUND, "reading {id}");
    }
    let opened = stats.forwarded.load(Ordering::SeqCst) - before;
    let seconds = started.elapsed().as_secs_f64();
    println!("300 requests for made-up ids in {seconds:.2} s opened {opened} MySQL connections");
    assert_eq!(opened, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn voucher_reads_with_redis_down_cost_mysql_nothing() {
    let proxy = Proxy::start("127.0.0.1:3306".parse::<SocketAddr>().unwrap()).await;
    let stats = proxy.stats();
    let closed = free_port();
    let manifest = Manifest::with_absolute_paths();
    let app = App::start_with(manifest.path(), backend_env(closed, proxy.port())).await;
    let before = stats.forwarded.load(Ordering::SeqCst);
    for i in 0..100 {
        let read = app
            .call(Method::GET, &format!("/vouchers/{}", 1 + i), None, None)
            .await;
        assert_eq!(read.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(read.error(), "unavailable");
    }
    assert_eq!(stats.forwarded.load(Ordering::SeqCst), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buyer_polling_her_orders_reads_mysql_at_most_once_a_second() {
    let proxy = Proxy::start("127.0.0.1:3306".parse::<SocketAddr>().unwrap()).await;
    let manifest = Manifest::with_absolute_paths();
    let app = App::start_with(manifest.path(), backend_env(6379, proxy.port())).await;
    let voucher = app.live_voucher(1).await;
    let stats = proxy.stats();
    let buyer = buyer_token(31);
    let before = stats.forwarded.load(Ordering::SeqCst);
    let started = Instant::now();
    // Before she holds an order, Redis answers for it.
    let mine = format!("/vouchers/{voucher}/orders/mine");
    for _ in 0..50 {
        let read = app.call(Method::GET, &mine, Some(&buyer), None).await;
        assert_eq!(read.status, StatusCode::NOT_FOUND);
    }
    assert_eq!(stats.forwarded.load(Ordering::SeqCst), before);
    // Made-up order ids, and her own once she holds one, at most once a second.
    let mut limited = 0;
    for i in 0..50 {
        let read = app
            .call(
                Method::GET,
                &format!("/orders/{}", 12_345 + i),
                Some(&buyer),
                None,
            )
            .await;
        match read.status {
            StatusCode::NOT_FOUND => {}
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(read.error(), "rate_limited");
                assert_eq!(read.headers["retry-after"], "1");
                limited += 1;
            }
            other => panic!("{other}"),
        }
    }
    assert!(limited > 0);
    let opened = stats.forwarded.load(Ordering::SeqCst) - before;
    let bound = started.elapsed().as_secs_f64().ceil() as u64 + 1;
    assert!(
        opened <= bound,
        "{opened} MySQL connections (at most {bound})"
    );
}
