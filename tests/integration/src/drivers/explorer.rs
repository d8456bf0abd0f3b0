//! What the schedule explorers share (backends::schedules, backends::bucket_schedules):
//! their settings, and the run of many random schedules where a panic is a schedule's
//! failure, not the test binary's.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};

/// Fails the schedule with the reason and every step and answer so far (`$world.log`)
/// unless `$cond` holds.
#[macro_export]
macro_rules! promise {
    ($world:expr, $cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(proptest::test_runner::TestCaseError::fail(format!(
                "{}\nsteps and answers:\n  {}",
                format!($($why)+),
                $world.log.join("\n  ")
            )));
        }
    };
}

/// A number from the environment, else `default`.
pub fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// The runtime a schedule plays on: two workers, as the machine has two cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// What a run of schedules found.
pub struct Explored<V> {
    /// Schedules played, shrinking included.
    pub ran: u64,
    /// The number of the first schedule that failed (0: none did).
    pub first_failure: u64,
    pub result: Result<(), TestError<V>>,
}

impl<V: std::fmt::Debug> Explored<V> {
    /// Prints how many `schedules` ran since `started`, and fails naming the first failure
    /// and its shrunk schedule.
    pub fn conclude(self, schedules: &str, started: std::time::Instant) {
        println!(
            "{} {schedules} run (shrinking included) in {:.1} s",
            self.ran,
            started.elapsed().as_secs_f64()
        );
        if let Err(failure) = self.result {
            panic!(
                "a promise broke (first failure at schedule {}): {failure}",
                self.first_failure
            );
        }
    }
}

/// Plays `cases` schedules drawn from `schedules` (proptest shrinks a failure to a short
/// one); a schedule that panics fails with the panic's message.
pub fn explore<S: Strategy>(
    cases: u32,
    schedules: S,
    play: impl Fn(S::Value) -> Result<(), TestCaseError>,
) -> Explored<S::Value> {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let ran = AtomicU64::new(0);
    let first_failure = AtomicU64::new(0);
    let result = TestRunner::new(config).run(&schedules, |schedule| {
        let case = ran.fetch_add(1, Ordering::SeqCst) + 1;
        let outcome =
            std::panic::catch_unwind(AssertUnwindSafe(|| play(schedule))).unwrap_or_else(|panic| {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(TestCaseError::fail(why))
            });
        if outcome.is_err() && first_failure.load(Ordering::SeqCst) == 0 {
            first_failure.store(case, Ordering::SeqCst);
        }
        outcome
    });
    Explored {
        ran: ran.load(Ordering::SeqCst),
        first_failure: first_failure.load(Ordering::SeqCst),
        result,
    }
}
