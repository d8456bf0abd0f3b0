//! The WASIp3 build's host interfaces (`wasm32-wasip2`, for Spin 4.0.x): `spin:redis@3.0.0`,
//! `spin:mysql@3.0.0`, `spin:variables@3.0.0`; its HTTP entry point is `entry::p3`. Spin
//! keeps an instance of it for many requests, several at once, so the instance keeps what
//! is costly to remake: its Redis connection ([`node`]), its MySQL connections ([`mysql`])
//! and its variables ([`variables`]).

pub mod known_buckets;
pub mod mysql;
pub mod node;
pub mod topology;
pub mod variables;

use std::time::Duration;

use std::cell::Cell;

thread_local! {
    static SERVING: Cell<usize> = const { Cell::new(0) };
}

/// How many requests the instance is serving now, this one included.
pub fn serving() -> usize {
    SERVING.get()
}

/// Counts a request in [`serving`] while it lives.
pub struct Serving;

impl Serving {
    pub fn start() -> Serving {
        SERVING.set(SERVING.get() + 1);
        Serving
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        SERVING.set(SERVING.get() - 1);
    }
}

/// Waits `duration` without holding up the instance's other requests.
pub async fn pause(duration: Duration) {
    let nanoseconds = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    spin_sdk::wasip3::clocks::monotonic_clock::wait_for(nanoseconds).await;
}
