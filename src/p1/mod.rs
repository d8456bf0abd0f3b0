//! The default build's host interfaces (`wasm32-wasip1`): Spin 2's `fermyon:spin/*@2.0.0`,
//! which every Spin and Fermyon Cloud run. Spin gives each request a fresh instance, so
//! nothing here outlives a request. Its HTTP entry point is `entry::p1`.

pub mod known_buckets;
pub mod mysql;
pub mod node;
pub mod topology;
pub mod variables;

use std::time::Duration;

/// Waits `duration`: the instance serves this one request, so it may block.
pub async fn pause(duration: Duration) {
    std::thread::sleep(duration);
}
