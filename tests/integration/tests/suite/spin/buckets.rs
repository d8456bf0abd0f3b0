//! A hot voucher's stock in buckets (`buckets` at its creation, docs/design.md,
//! "Buckets"), under real Spin: each bucket a voucher row and Redis keys of its own, each
//! buyer pinned to one and sent round the others once hers is sold out. The promises are
//! a single voucher's: never more orders than the stock, one order per buyer across the
//! buckets, every unit sold to the crowd pressing for it, a unit given back sold again.
//! The suite runs on the shared Redis and on a Redis Cluster (scripts/test-redis-cluster.sh),
//! where the buckets sit on different slots.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::json;

use redis::AsyncCommands;
use seckill_core::sale::Keys;
use seckill_core::{BucketId, OrderId};
use seckill_tests::drivers::app::{Answer, App, ADMIN_TOKEN};
use seckill_tests::drivers::crowd::{assert_promises, sale, size, Storefront};
use seckill_tests::drivers::{invariants, scripts};
use seckill_tests::servers::local::{
    mysql_first, mysql_rows, redis, redis_cluster, redis_cluster_nodes,
};

/// The sale's buckets in MySQL: (bucket, initial stock, stock), the voucher first.
async fn buckets_of(voucher: u64) -> Vec<(u64, u64, u64)> {
    mysql_rows(
        "SELECT voucher_id, initial_stock, stock FROM tb_seckill_voucher WHERE sale_id = ? \
         ORDER BY voucher_id",
        (voucher,),
    )
    .await
}

/// The bucket whose stock an order took.
async fn bucket_of(order: u64) -> u64 {
    mysql_first(
        "SELECT voucher_id FROM tb_voucher_order WHERE id = ?",
        (order,),
    )
    .await
    .expect("the order in MySQL")
}

/// A live voucher of `stock` units in `buckets`, shown whole.
async fn create(app: &App, stock: u64, buckets: u64) -> u64 {
    let front = Storefront::new(format!("http://{}", app.addr()));
    let voucher = front.create_bucketed(stock, buckets).await;
    let page = app
        .call(Method::GET, &format!("/vouchers/{voucher}"), None, None)
        .await;
    assert_eq!(
        (
            &page.body["stock"],
            &page.body["remaining"],
            &page.body["status"]
        ),
        (&json!(stock), &json!(stock), &json!("live")),
        "{page:?}"
    );
    voucher
}

/// Presses as `user` until a `201` or a `409` other than `sold_out`, or until `within`.
async fn buy_within(app: &App, voucher: u64, user: u64, within: Duration) -> Answer {
    let deadline = Instant::now() + within;
    loop {
        let answer = app.buy(voucher, user).await;
        let sold_out = answer.status == StatusCode::CONFLICT && answer.error() == "sold_out";
        if !sold_out || Instant::now() >= deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crowd_buys_a_bucketed_stock_exactly_once_over_every_bucket() {
    let app = App::start().await;
    let front = Storefront::new(format!("http://{}", app.addr()));
    let (stock, buyers, spread) = size((300, 1500, 2), (40, 160, 1));
    for buckets in [2, 5] {
        let voucher = create(&app, stock, buckets).await;
        let shares = buckets_of(voucher).await;
        assert_eq!(shares.len() as u64, buckets);
        assert_eq!(shares.iter().map(|b| b.1).sum::<u64>(), stock);
        let (least, most) = (
            shares.iter().map(|b| b.1).min().unwrap(),
            shares.iter().map(|b| b.1).max().unwrap(),
        );
        assert!(most - least <= 1, "an even spread: {shares:?}");

        let first_user = 7_000_000 + 100_000 * buckets;
        let finals = sale(&front, voucher, first_user, buyers, spread, 64)
            .await
            .unwrap();
        assert!(
            finals.iter().all(|(_, f)| f.failures.is_empty()),
            "a 5xx: {}",
            app.troubles()
        );
        assert_promises(&front, voucher, stock, &finals, invariants::read).await;
        assert!(
            buckets_of(voucher).await.iter().all(|b| b.2 == 0),
            "every bucket sold out"
        );
        let sold_out = finals
            .iter()
            .filter(|(_, f)| f.status == 409 && f.error == "sold_out")
            .count() as u64;
        assert_eq!(sold_out, buyers - stock, "every other buyer hears sold_out");

        let page = app
            .call(Method::GET, &format!("/vouchers/{voucher}"), None, None)
            .await;
        assert_eq!(page.status, StatusCode::OK, "{page:?}");
        assert_eq!(
            (
                &page.body["stock"],
                &page.body["remaining"],
                &page.body["status"]
            ),
            (&json!(stock), &json!(0), &json!("sold_out")),
            "{page:?}"
        );
        // The merchant's page of orders lists every bucket's, under the voucher.
        let orders = app
            .get(
                &format!("/vouchers/{voucher}/orders?limit=1000"),
                ADMIN_TOKEN,
            )
            .await;
        let listed = orders.body["orders"].as_array().expect("orders");
        assert_eq!(listed.len() as u64, stock, "{orders:?}");
        assert!(listed.iter().all(|o| o["voucher_id"] == json!(voucher)));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_unit_given_back_goes_back_to_its_bucket_and_sells_again() {
    let app = App::start().await;
    let buckets = 3;
    let voucher = create(&app, buckets, buckets).await;
    let ids: Vec<u64> = buckets_of(voucher).await.iter().map(|b| b.0).collect();
    // Buyer u's bucket is u mod 3: one buyer of each takes her bucket's one unit.
    let base = 9_100_000;
    let mut orders = Vec::new();
    for user in base..base + buckets {
        let answer = app.buy(voucher, user).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
        assert_eq!(answer.body["voucher_id"], json!(voucher), "{answer:?}");
        let order = answer.order_id().unwrap();
        orders.push((user, order, bucket_of(order).await));
    }
    let sold: BTreeSet<u64> = orders.iter().map(|o| o.2).collect();
    assert_eq!(
        sold,
        ids.iter().copied().collect(),
        "one unit from each bucket"
    );
    let late = app.buy(voucher, base + 10).await;
    assert_eq!(
        (late.status, late.error()),
        (StatusCode::CONFLICT, "sold_out")
    );

    // A buyer of another bucket than the cancelled order's buys its unit, which went back
    // to the bucket it came from; the buyer who cancelled may not buy again.
    let (canceller, cancelled, bucket) = orders[1];
    let answer = app.cancel(cancelled, canceller).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(answer.body["voucher_id"], json!(voucher), "{answer:?}");
    let again = app.buy(voucher, canceller).await;
    assert_eq!(
        (again.status, again.error()),
        (StatusCode::CONFLICT, "order_cancelled"),
        "{again:?}"
    );
    let other = (base + 11..)
        .find(|user| user % buckets != canceller % buckets)
        .unwrap();
    let bought = buy_within(&app, voucher, other, Duration::from_secs(5)).await;
    assert_eq!(bought.status, StatusCode::CREATED, "{bought:?}");
    let order = bought.order_id().unwrap();
    assert_eq!(
        bucket_of(order).await,
        bucket,
        "sold from the bucket it went back to"
    );
    let record = invariants::read(voucher).await;
    record.assert_sound(&[(order, other)]);
    assert_eq!(record.live_orders(), buckets);

    // Her order reads back under the voucher, whichever bucket sold it.
    let mine = app
        .get_as(&format!("/vouchers/{voucher}/orders/mine"), other)
        .await;
    assert_eq!(mine.status, StatusCode::OK, "{mine:?}");
    assert_eq!(mine.body["order_id"], json!(order.to_string()));
    assert_eq!(mine.body["voucher_id"], json!(voucher));
}

/// A buyer whose bucket was sold out walked round the ring and bought in another one: from
/// then on her presses hear that order, whatever her own bucket says (marked sold out by
/// a later buyer who found every bucket empty, or the sale ended).
#[tokio::test(flavor = "multi_thread")]
async fn a_buyer_who_walked_to_another_bucket_hears_her_order_there_from_then_on() {
    let app = App::start().await;
    for buckets in [2, 3] {
        let voucher = create(&app, buckets, buckets).await;
        // Buyer u's bucket is u mod buckets: `base` and its multiples are the first's.
        let base = 9_200_000 + 60 * buckets;
        let first = app.buy(voucher, base).await;
        assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
        // Every other bucket's unit but the last's goes to a buyer of its own.
        for bucket in 1..buckets - 1 {
            let own = app.buy(voucher, base + bucket).await;
            assert_eq!(own.status, StatusCode::CREATED, "{own:?}");
        }
        let walker = base + buckets;
        let walked = app.buy(voucher, walker).await;
        assert_eq!(walked.status, StatusCode::CREATED, "{walked:?}");
        let order = walked.order_id().unwrap();
        assert_ne!(bucket_of(order).await, voucher, "sold by another bucket");
        // A later buyer of the first bucket finds them all empty and marks it.
        let late = app.buy(voucher, base + 2 * buckets).await;
        assert_eq!(
            (late.status, late.error()),
            (StatusCode::CONFLICT, "sold_out")
        );
        let again = app.buy(voucher, walker).await;
        assert_eq!(
            (again.status, again.error(), again.order_id()),
            (StatusCode::CONFLICT, "already_ordered", Some(order)),
            "{buckets} buckets, her bucket marked: {again:?}"
        );
        let end = app
            .post(&format!("/vouchers/{voucher}/end"), ADMIN_TOKEN)
            .await;
        assert_eq!(end.status, StatusCode::OK, "{end:?}");
        let after = app.buy(voucher, walker).await;
        assert_eq!(
            (after.status, after.error(), after.order_id()),
            (StatusCode::CONFLICT, "already_ordered", Some(order)),
            "{buckets} buckets, the sale ended: {after:?}"
        );
        let ended = app.buy(voucher, base + 3 * buckets).await;
        assert_eq!(
            (ended.status, ended.error()),
            (StatusCode::CONFLICT, "ended")
        );
        invariants::read(voucher)
            .await
            .assert_sound(&[(order, walker)]);
    }
}

/// Her home bucket forgets where her walk went, as when a press of hers raced the walk
/// before it pointed her bucket at her purchase: her next press there is admitted afresh,
/// and MySQL's verdict decides. Her home is the second bucket of a sale of two.
async fn forget_walk(voucher: u64, buyer: u64) {
    let home = buckets_of(voucher).await[1].0;
    let buyers = Keys::new(BucketId::from_raw(home)).buyers();
    let _: () = match redis_cluster_nodes() {
        Some(nodes) => redis_cluster(&nodes).await.hdel(buyers, buyer).await,
        None => redis().await.hdel(buyers, buyer).await,
    }
    .unwrap();
}

/// A sale of two buckets of one unit each, its first bucket A (even buyers' home) and B
/// (odd buyers'); buyer `x` (odd) walked to A for her order, once `y` (odd) took B's
/// unit: the sale, and their orders, A's then B's.
async fn walked_to_the_first_bucket(app: &App, x: u64, y: u64) -> (u64, u64, u64) {
    let voucher = create(app, 2, 2).await;
    let in_b = app.buy(voucher, y).await;
    assert_eq!(in_b.status, StatusCode::CREATED, "{in_b:?}");
    let in_a = app.buy(voucher, x).await;
    assert_eq!(in_a.status, StatusCode::CREATED, "{in_a:?}");
    let (in_a, in_b) = (in_a.order_id().unwrap(), in_b.order_id().unwrap());
    assert_eq!(bucket_of(in_a).await, voucher, "walked to A");
    assert_ne!(bucket_of(in_b).await, voucher);
    (voucher, in_a, in_b)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_buyer_whose_order_in_another_bucket_was_cancelled_hears_so_at_hers() {
    let app = App::start().await;
    let (x, y) = (9_200_001, 9_200_003);
    let (voucher, in_a, in_b) = walked_to_the_first_bucket(&app, x, y).await;
    forget_walk(voucher, x).await;
    // She cancels hers (A's unit back to A); B's buyer cancels his, so that her own
    // bucket has a unit and no record of her when she presses again.
    for (order, user) in [(in_a, x), (in_b, y)] {
        let cancelled = app.cancel(order, user).await;
        assert_eq!(cancelled.status, StatusCode::OK, "{cancelled:?}");
    }
    let again = app.buy(voucher, x).await;
    assert_eq!(
        (again.status, again.error()),
        (StatusCode::CONFLICT, "order_cancelled"),
        "{again:?}"
    );
    assert_eq!(again.body["order_id"], json!(in_a.to_string()), "{again:?}");
    let again = app.buy(voucher, x).await;
    assert_eq!(again.error(), "order_cancelled", "{again:?}");
    // B's unit was not hers to hold: B's next buyer buys it.
    let late = buy_within(&app, voucher, 9_200_005, Duration::from_secs(5)).await;
    assert_eq!(late.status, StatusCode::CREATED, "{late:?}");
    assert_ne!(bucket_of(late.order_id().unwrap()).await, voucher);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_order_mysql_lost_yields_to_the_one_its_buyer_made_since_in_another_bucket() {
    let app = App::start().await;
    let (x, y) = (9_300_001, 9_300_003);
    let (voucher, in_a, in_b) = walked_to_the_first_bucket(&app, x, y).await;
    // MySQL fails over to a replica without her order; B's buyer cancels, and she, whom
    // B has no record of (B's pointer at her walk lost, as when a press of hers raced the
    // walk), presses again there and hears 201 for another order.
    scripts::lose_commits(BucketId::from_raw(voucher), &[OrderId::from_raw(in_a)]).await;
    forget_walk(voucher, x).await;
    let cancelled = app.cancel(in_b, y).await;
    assert_eq!(cancelled.status, StatusCode::OK, "{cancelled:?}");
    let again = app.buy(voucher, x).await;
    assert_eq!(again.status, StatusCode::CREATED, "{again:?}");
    let theirs = again.order_id().unwrap();
    // A's sweep heals: her order in B wins, and the unit MySQL holds for A is A's again.
    let swept = app
        .post(&format!("/vouchers/{voucher}/expire"), ADMIN_TOKEN)
        .await;
    assert_eq!(swept.status, StatusCode::OK, "{swept:?}");
    let health = app.get("/health", ADMIN_TOKEN).await;
    let behind = health.body["mysql_behind_vouchers"].as_array().cloned();
    assert!(
        !behind.unwrap_or_default().contains(&json!(voucher)),
        "A is still behind MySQL: {health:?}"
    );
    let mine = app.buy(voucher, x).await;
    assert_eq!(
        (mine.error(), &mine.body["order_id"]),
        ("already_ordered", &json!(theirs.to_string())),
        "{mine:?}"
    );
    let late = buy_within(&app, voucher, 9_300_000, Duration::from_secs(5)).await;
    assert_eq!(late.status, StatusCode::CREATED, "{late:?}");
    assert_eq!(bucket_of(late.order_id().unwrap()).await, voucher);
}

#[tokio::test]
async fn buckets_are_checked_at_creation() {
    let app = App::start().await;
    let at = |offset| (chrono::Utc::now() + chrono::Duration::seconds(offset)).to_rfc3339();
    for (stock, buckets) in [(5, 0), (5, 6), (100, 65), (5, -1)] {
        let body = json!({
            "title": "bucketed voucher", "stock": stock, "buckets": buckets,
            "begin_time": at(-60), "end_time": at(3600),
        });
        let answer = app
            .call(Method::POST, "/vouchers", Some(ADMIN_TOKEN), Some(body))
            .await;
        assert_eq!(
            (answer.status, answer.error()),
            (StatusCode::BAD_REQUEST, "bad_request"),
            "{stock} units in {buckets} buckets: {answer:?}"
        );
    }
}
