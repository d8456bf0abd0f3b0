//! The sale's clock when Redis's wall clock steps: `TIME` can go back (an NTP step, a
//! failover to a replica whose clock lags), yet a buyer told `ended` must never be
//! admitted later. A private `redis-server` runs under libfaketime (Debian's `faketime`,
//! which scripts/services.sh installs) and the test steps its clock back and forth across
//! the sale's begin and end: admission.lua's `begun` and `ended` and view.lua's clock must
//! hold the boundaries crossed.
//!
//! Nothing here reaches the shared Redis or MariaDB: the sale lives on the private server
//! only, under a made-up voucher id.

use seckill_core::sale::{Decision, ReadView, Shown, View};
use seckill_core::{BucketId, UserId};
use seckill_tests::drivers::scripts::Sale;
use seckill_tests::servers::faults::RedisServer;
use seckill_tests::servers::local::fresh_voucher_id;

const HOUR_S: i64 = 3600;
const HOUR_MS: i64 = HOUR_S * 1000;

/// The private server and its sale.
struct Rig {
    redis: RedisServer,
    sale: Sale,
}

impl Rig {
    /// Steps Redis's wall clock to `offset_s` seconds off the real one; returns its reading.
    async fn step(&self, offset_s: i64) -> i64 {
        self.redis.set_clock(offset_s);
        self.sale.now_ms().await
    }

    async fn decide(&self, user: u64) -> Decision {
        self.sale.admit(UserId::from_raw(user)).await.decision
    }

    async fn view(&self) -> View {
        let read = ReadView {
            voucher_id: self.sale.voucher,
        };
        match self.sale.call(&read).await.unwrap() {
            Shown::Sale(view) => view,
            other => panic!("the sale is gone: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_boundary_crossed_stays_crossed_when_the_clock_steps_back() {
    let redis = RedisServer::start_with_fake_clock().await;
    let sale = Sale {
        conn: redis.conn().await,
        voucher: BucketId::from_raw(fresh_voucher_id()),
    };
    let rig = Rig { redis, sale };
    // The window opens an hour from the real time and lasts an hour. Each step reads the
    // clock back, so that a clock that did not move fails here, not as a false pass.
    let now = rig.step(0).await;
    let (begin_ms, end_ms) = (now + HOUR_MS, now + 2 * HOUR_MS);
    rig.sale.load(10, begin_ms, end_ms, &[]).await;
    let before_begin = 0;
    let in_window = 3 * HOUR_S / 2;
    let after_end = 5 * HOUR_S / 2;

    assert_eq!(rig.decide(1).await, Decision::NotStarted);
    assert!(
        rig.view().await.now_ms < begin_ms,
        "the view runs ahead of TIME"
    );

    assert!((begin_ms..end_ms).contains(&rig.step(in_window).await));
    assert!(matches!(rig.decide(2).await, Decision::Admitted(_)));

    // Back before the begin: the sale has begun, and stays so.
    assert!(rig.step(before_begin).await < begin_ms);
    let third = rig.decide(3).await;
    assert!(matches!(third, Decision::Admitted(_)), "{third:?}");
    let view = rig.view().await;
    assert!(
        view.now_ms >= begin_ms,
        "the view's clock went back before the begin: {} < {begin_ms}",
        view.now_ms
    );

    assert!(rig.step(after_end).await >= end_ms);
    assert_eq!(rig.decide(4).await, Decision::Ended);

    // Back into the window, and before the begin: `ended` is final, for the view too.
    for (user, offset_s) in [(5, in_window), (6, before_begin)] {
        assert!(rig.step(offset_s).await < end_ms);
        assert_eq!(rig.decide(user).await, Decision::Ended);
        let view = rig.view().await;
        assert!(
            view.now_ms >= end_ms,
            "the view's clock went back before the end: {} < {end_ms}",
            view.now_ms
        );
    }

    // Three days on (the keys outlive the end by a week), then back again.
    assert!(rig.step(after_end + 3 * 24 * HOUR_S).await > end_ms);
    assert_eq!(rig.decide(8).await, Decision::Ended);
    assert!(rig.step(before_begin).await < begin_ms);
    assert_eq!(rig.decide(9).await, Decision::Ended);
    assert!(rig.view().await.now_ms >= end_ms);
    // Ten units, two buyers: nobody was admitted after the end.
    assert_eq!(rig.sale.stock().await, Some(8));
}
