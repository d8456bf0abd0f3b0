//! The default build's host interfaces (`wasm32-wasip1`): Spin 2's `fermyon:spin/*@2.0.0`,
//! which every Spin and Fermyon Cloud run. Spin gives each request a fresh instance, so
//! nothing here outlives a request. Its HTTP entry point is `entry::p1`.

pub mod known_buckets;
pub mod mysql;
pub mod node;
pub mod topology;
pub mod variables;

use std::future::poll_fn;
use std::task::Poll;
use std::time::Duration;

use spin_executor::CancelOnDropToken;
use spin_sdk::wit::wasi::clocks0_2_0::monotonic_clock;

/// Waits `duration` as the request's other work does (on Spin's executor), so that it can
/// race with it: reading a body against its deadline.
pub async fn pause(duration: Duration) {
    let nanoseconds = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    let deadline = monotonic_clock::now().saturating_add(nanoseconds);
    let mut waiting: Option<CancelOnDropToken> = None;
    poll_fn(|context| {
        if monotonic_clock::now() >= deadline {
            return Poll::Ready(());
        }
        let alarm = monotonic_clock::subscribe_instant(deadline);
        waiting =
            Some(spin_executor::push_waker_and_get_token(alarm, context.waker().clone()).into());
        Poll::Pending
    })
    .await
}
