//! The sale's edges under real Spin: a sale that ended long ago, made-up ids, reads with
//! Redis down. MySQL connections are counted by a proxy in front of MySQL.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use mysql_async::prelude::Queryable;
use redis::AsyncCommands;
use reqwest::{Method, StatusCode};

use seckill_core::sale::{Keys, HIGHEST_VOUCHER};
use seckill_core::BucketId;
use seckill_tests::drivers::app::{behind_proxy, buyer_token, App, ADMIN_TOKEN};
use seckill_tests::drivers::scripts;
use seckill_tests::servers::faults::{backend_env, free_port, Manifest};
use seckill_tests::servers::local::{mysql_first, redis};
use seckill_tests::servers::proxy::Proxy;

async fn press(app: &App, voucher: u64, user: u64) -> (StatusCode, String) {
    let answer = app.buy(voucher, user).await;
    (answer.status, answer.error().to_string())
}

/// Redis loses the sale of `voucher`: its hash, buyers, queue and counters.
async fn forget_sale(voucher: u64) {
    let keys = Keys::new(BucketId::from_raw(voucher));
    let sale = [keys.voucher(), keys.buyers(), keys.queue(), keys.metrics()];
    let _: () = redis().await.del(&sale).await.unwrap();
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
        "INSERT INTO tb_voucher_order (id, user_id, voucher_id, sale_id, status, create_time) \
         VALUES (?, 2, ?, ?, 1, UTC_TIMESTAMP())",
        (order_id, voucher, voucher),
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
        .post(&format!("/vouchers/{voucher}/sync"), ADMIN_TOKEN)
        .await;
    assert_eq!(synced.status, StatusCode::OK, "{:?}", synced.body);
    let hers = app.buy(voucher, 2).await;
    assert_eq!(hers.status, StatusCode::CONFLICT);
    assert_eq!(hers.order_id(), Some(order_id));
    assert_eq!(press(&app, voucher, 3).await, ended);

    // Once Redis let the sale's keys expire, the sale comes back ended.
    forget_sale(voucher).await;
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
    forget_sale(voucher).await;
    let unavailable = (StatusCode::SERVICE_UNAVAILABLE, "unavailable".to_string());
    assert_eq!(press(&app, voucher, 2).await, unavailable);
    let stale = |health: &serde_json::Value| {
        health["stale_vouchers"]
            .as_array()
            .is_some_and(|ids| ids.contains(&serde_json::json!(voucher)))
    };
    let health = app.get("/health", ADMIN_TOKEN).await;
    assert!(stale(&health.body), "{health:?}");

    let path = format!("/vouchers/{voucher}/sync");
    let synced = app.post(&path, ADMIN_TOKEN).await;
    assert_eq!(synced.status, StatusCode::OK, "{synced:?}");
    let health = app.get("/health", ADMIN_TOKEN).await;
    assert!(!stale(&health.body), "{health:?}");
    assert_eq!(press(&app, voucher, 2).await.0, StatusCode::CREATED);
    let again = app.buy(voucher, 1).await;
    assert_eq!(again.error(), "already_ordered", "{again:?}");
    assert_eq!(again.order_id(), first.order_id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn made_up_ids_are_404_without_mysql() {
    let (proxy, _manifest, app) = behind_proxy(6379).await;
    // Redis learns the highest id from a creation, unless an earlier suite's sale (a
    // private MySQL's ids, on this shared Redis) taught it a higher one: made-up ids are
    // above what Redis knows.
    let created = app.live_voucher(1).await;
    let known: Option<u64> = redis().await.get(HIGHEST_VOUCHER).await.unwrap();
    let highest = known.unwrap_or(created).max(created);
    let stats = proxy.stats();
    let before = stats.forwarded.load(Ordering::SeqCst);
    let started = Instant::now();
    let buyer = buyer_token(7);
    for i in 1..=150 {
        let id = highest + i * 1_000_003;
        let bought = app.post(&format!("/vouchers/{id}/orders"), &buyer).await;
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
    let (proxy, _manifest, app) = behind_proxy(6379).await;
    let voucher = app.live_voucher(1).await;
    let stats = proxy.stats();
    let buyer = buyer_token(31);
    let before = stats.forwarded.load(Ordering::SeqCst);
    let started = Instant::now();
    // Before she holds an order, Redis answers for it.
    let mine = format!("/vouchers/{voucher}/orders/mine");
    for _ in 0..50 {
        let read = app.get(&mine, &buyer).await;
        assert_eq!(read.status, StatusCode::NOT_FOUND);
    }
    assert_eq!(stats.forwarded.load(Ordering::SeqCst), before);
    // Made-up order ids, and her own once she holds one, at most once a second.
    let mut limited = 0;
    for i in 0..50 {
        let read = app.get(&format!("/orders/{}", 12_345 + i), &buyer).await;
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

async fn cancel(app: &App, order: u64, token: &str) -> seckill_tests::drivers::app::Answer {
    let path = format!("/orders/{order}/cancel");
    app.post(&path, token).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buyer_s_cancels_of_orders_not_hers_cost_mysql_at_most_once_a_second() {
    let (proxy, _manifest, app) = behind_proxy(6379).await;
    let voucher = app.live_voucher(2).await;
    let (neighbour, hostile) = (41, 42);
    let theirs = app.buy(voucher, neighbour).await.order_id().unwrap();
    let hers = app.buy(voucher, hostile).await.order_id().unwrap();
    let token = buyer_token(hostile);
    let stats = proxy.stats();
    let before = stats.forwarded.load(Ordering::SeqCst);
    let started = Instant::now();
    // Her neighbour's order and made-up ids around it, as guessing them goes.
    let (mut not_found, mut limited) = (0, 0);
    for i in 0..200u64 {
        let id = if i % 2 == 0 { theirs } else { theirs + i };
        let cancel = cancel(&app, id, &token).await;
        match (cancel.status, cancel.error()) {
            (StatusCode::NOT_FOUND, "not_found") => not_found += 1,
            (StatusCode::TOO_MANY_REQUESTS, "rate_limited") => {
                assert_eq!(cancel.headers["retry-after"], "1");
                limited += 1;
            }
            other => panic!("cancelling {id}: {other:?}"),
        }
    }
    let opened = stats.forwarded.load(Ordering::SeqCst) - before;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "200 cancels not hers in {seconds:.2} s: {not_found} x 404, {limited} x 429, \
         {opened} MySQL connections"
    );
    let bound = seconds.ceil() as u64 + 1;
    assert!(
        opened <= bound,
        "{opened} MySQL connections (at most {bound})"
    );
    assert!(not_found >= 1 && limited > 0);
    // Her own order is hers to cancel once a second has passed, and cancelling it frees
    // the next cancel at once.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let own = cancel(&app, hers, &token).await;
    assert_eq!(
        (own.status, own.body["status"].as_str()),
        (StatusCode::OK, Some("cancelled"))
    );
    let again = cancel(&app, hers, &token).await;
    assert_eq!(again.status, StatusCode::OK, "{again:?}");
    // Her neighbour's order is as it was.
    let theirs_now = app.get(&format!("/orders/{theirs}"), ADMIN_TOKEN).await;
    assert_eq!(theirs_now.body["status"], "unpaid");
}

#[tokio::test]
async fn a_quiet_sale_s_product_page_gives_an_expired_order_s_unit_back() {
    // No test here reads the feed, whose reads sweep too.
    let app = App::start().await;
    let at = |offset: i64| (chrono::Utc::now() + chrono::Duration::seconds(offset)).to_rfc3339();
    let pay_within_s = 1;
    for stock in [1, 3] {
        let body = serde_json::json!({"title": "quiet", "stock": stock, "begin_time": at(-60),
            "end_time": at(3600), "pay_within_s": pay_within_s});
        let created = app
            .call(Method::POST, "/vouchers", Some(ADMIN_TOKEN), Some(body))
            .await;
        let voucher = created.body["id"].as_u64().unwrap();
        for buyer in 1..=stock {
            assert_eq!(
                press(&app, voucher, 500 + buyer).await.0,
                StatusCode::CREATED
            );
        }
        let page = format!("/vouchers/{voucher}");
        let read = || async {
            let shown = app.call(Method::GET, &page, None, None).await;
            shown.body["remaining"].as_u64().unwrap()
        };
        assert_eq!(read().await, 0);
        tokio::time::sleep(std::time::Duration::from_millis(pay_within_s * 1000 + 1100)).await;
        // The first read after the deadline shows the sale as it stood, and sweeps after
        // its answer; a read a moment later shows every unit back.
        let mut reads = vec![read().await];
        let started = Instant::now();
        while reads.last() != Some(&stock) && started.elapsed().as_secs() < 10 {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            reads.push(read().await);
        }
        assert_eq!(reads.last(), Some(&stock), "{reads:?}");
        let record = seckill_tests::drivers::invariants::read(voucher).await;
        record.assert_settled(&[]);
        assert!(
            record.statuses.values().all(|status| *status == 7),
            "{record:?}"
        );
    }
}

/// How many feed pages MySQL has made durable (`tb_feed_read`).
async fn durable_pages() -> u64 {
    let sql = "SELECT pages FROM tb_feed_read WHERE id = 1";
    mysql_first(sql, ()).await.unwrap()
}

#[tokio::test]
async fn the_feed_serves_events_only_after_a_write_that_makes_them_durable() {
    // No other test here reads the feed.
    let app = App::start().await;
    let voucher = app.live_voucher(1).await;
    assert_eq!(press(&app, voucher, 1).await.0, StatusCode::CREATED);
    let app = &app;
    let read = |after: String| async move {
        let path = format!("/events?after={after}&limit=1");
        app.get(&path, ADMIN_TOKEN).await
    };
    let before = durable_pages().await;
    let page = read("0".into()).await;
    assert_eq!(page.body["events"].as_array().unwrap().len(), 1, "{page:?}");
    assert_eq!(durable_pages().await, before + 1);
    // An empty page holds nothing to make durable.
    let end = read(u64::MAX.to_string()).await;
    assert_eq!(end.body["events"], serde_json::json!([]), "{end:?}");
    assert_eq!(durable_pages().await, before + 1);
}
