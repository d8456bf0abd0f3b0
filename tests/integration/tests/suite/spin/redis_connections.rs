//! What a request costs in Redis connections, per build, counted on a private
//! `redis-server` (the other tests' traffic on the shared one cannot add to it). The
//! default build opens one for every request: Spin 2 keeps nothing between requests. The
//! WASIp3 build's instance keeps its connection, and its waiters' (a buyer waiting for
//! her batch's outcome `BLPOP`s on a connection of her own), for the requests Spin gives
//! it: a sale costs connections per instance, not per press.

use std::sync::Arc;

use tokio::task::JoinSet;

use seckill_tests::drivers::app::{p3, App};
use seckill_tests::servers::faults::{
    backend_env, redis_counters, Manifest, Persistence, RedisServer,
};

/// Buyers pressing at once, and the presses each makes one after the other: enough at
/// once that some wait for a batch another request commits.
const AT_ONCE: u64 = 8;
const PRESSES_EACH: u64 = 12;

#[tokio::test]
async fn connections_are_per_request_in_the_default_build_and_per_instance_in_the_wasip3_build() {
    let redis = RedisServer::start(Persistence::None).await;
    let manifest = Manifest::with_absolute_paths();
    let app = Arc::new(App::start_with(manifest.path(), backend_env(redis.port(), 3306)).await);
    // Half the presses win, the rest meet a sold-out voucher.
    let presses = AT_ONCE * PRESSES_EACH;
    let voucher = app.voucher(presses / 2, -60, 3600).await;

    let mut counters = redis.conn().await;
    let (_, before) = redis_counters(&mut counters).await;
    let mut lanes = JoinSet::new();
    for lane in 0..AT_ONCE {
        let app = app.clone();
        lanes.spawn(async move {
            let mut statuses = Vec::new();
            for press in 0..PRESSES_EACH {
                let user = 1 + lane * PRESSES_EACH + press;
                statuses.push(app.buy(voucher, user).await.status.as_u16());
            }
            statuses
        });
    }
    let statuses: Vec<u16> = lanes.join_all().await.into_iter().flatten().collect();
    let (_, after) = redis_counters(&mut counters).await;
    let connections = after - before;
    let sold = statuses.iter().filter(|&&status| status == 201).count() as u64;
    println!(
        "redis_connections: {presses} presses ({sold} bought, {AT_ONCE} at once): \
         {connections} Redis connections"
    );
    assert_eq!(sold, presses / 2, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|&status| status == 201 || status == 409),
        "{statuses:?}"
    );
    if p3() {
        // Spin reuses an instance for up to 128 requests and runs about as many as there
        // are requests in flight, each with its connection and a waiter's: here about 16,
        // bounded with room for a busy machine's extra instances.
        assert!(
            connections * 3 <= presses,
            "{connections} Redis connections for {presses} presses"
        );
    } else {
        assert!(
            connections >= presses,
            "{connections} Redis connections for {presses} presses"
        );
    }
}
