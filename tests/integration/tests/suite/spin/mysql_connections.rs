//! What a request costs in MySQL connections, per build, counted by a proxy in front of
//! the shared MariaDB. The default build opens one for every request that needs MySQL:
//! Spin 2 keeps nothing between requests. The WASIp3 build's instance keeps the
//! connection of a request it served alone (src/platform/p3/mysql.rs) and hands it to its next
//! one; a connection that died while kept (MySQL restarted, or the proxy cut it) costs
//! its request a new one, not an error. An instance serving a crowd closes its
//! connections once its MySQL calls are done (spin::concurrency bounds them).

use std::sync::atomic::Ordering;

use seckill_tests::drivers::app::{behind_proxy, p3, ADMIN_TOKEN};

/// Order reads one after the other, each of which asks MySQL.
const READS: u64 = 24;

#[tokio::test]
async fn a_request_opens_a_mysql_connection_in_the_default_build_and_an_instance_keeps_one_in_the_wasip3_build(
) {
    let (proxy, _manifest, app) = behind_proxy(6379).await;
    let voucher = app.live_voucher(1).await;
    let order = app.buy(voucher, 1).await.order_id().expect("an order");
    let path = format!("/orders/{order}");
    let stats = proxy.stats();
    let forwarded = || stats.forwarded.load(Ordering::SeqCst);

    let read = |round: &'static str| {
        let (app, path) = (&app, &path);
        async move {
            let before = forwarded();
            for _ in 0..READS {
                let answer = app.get(path, ADMIN_TOKEN).await;
                assert_eq!(answer.status, 200, "{round}: {answer:?}");
            }
            forwarded() - before
        }
    };
    let steady = read("steady").await;
    // Every connection open now dies under the instances that keep them.
    proxy.cut();
    proxy.restore();
    let after_cut = read("after a cut").await;
    println!(
        "mysql_connections: {READS} order reads: {steady} MySQL connections; \
         after a cut, {after_cut}"
    );
    if p3() {
        // One instance serves reads that come one after the other; a busy machine may
        // start a second.
        assert!(steady <= 2, "{steady} MySQL connections for {READS} reads");
        assert!(
            (1..=2).contains(&after_cut),
            "{after_cut} MySQL connections for {READS} reads after a cut"
        );
    } else {
        assert_eq!(steady, READS);
        assert_eq!(after_cut, READS);
    }
}
