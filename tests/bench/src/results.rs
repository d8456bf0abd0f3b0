//! What one run measured, saved as `results.json` so the report and the chart can be
//! drawn again from the same figures (`seckill-bench report`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::counters::ServerDelta;

/// Everything that is measured at each concurrency level: the component's paths and
/// the limits they are held against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Path {
    /// Limit 1: an unknown route, answered 404 by the component without any backend.
    HostFloor,
    /// Limit 4: the benchmark's redis-floor component, one Redis connection and a PING.
    RedisFloor,
    /// The redis-floor component answering 404 without Redis: set against RedisFloor,
    /// it tells the cost of a Redis connection from the cost of an instance.
    FloorComponent,
    /// Path (a): a buyer who never ordered, on a sold-out voucher.
    SoldOut,
    /// Path (b): a buyer who already ordered, trying again.
    Duplicate,
    /// Path (c): distinct buyers on a voucher with stock for all of them.
    Purchase,
    /// Limit 2: the admission script by EVALSHA from a native client, sold-out case.
    RedisSoldOut,
    /// Limit 2: the admission script by EVALSHA from a native client, admitted case.
    RedisAdmitted,
    /// Limit 3: the purchase's prepared CALL on a fresh connection per call, as Spin does.
    MysqlFresh,
    /// Limit 3: the same CALL on connections kept open, prepared once each.
    MysqlKept,
}

impl Path {
    pub const ALL: [Path; 10] = [
        Path::HostFloor,
        Path::RedisFloor,
        Path::FloorComponent,
        Path::SoldOut,
        Path::Duplicate,
        Path::Purchase,
        Path::RedisSoldOut,
        Path::RedisAdmitted,
        Path::MysqlFresh,
        Path::MysqlKept,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Path::HostFloor => "limit 1: host floor (404)",
            Path::RedisFloor => "limit 4: host Redis floor (PING)",
            Path::FloorComponent => "redis-floor component alone (404)",
            Path::SoldOut => "(a) sold out",
            Path::Duplicate => "(b) duplicate order",
            Path::Purchase => "(c) purchase",
            Path::RedisSoldOut => "limit 2: Redis alone, sold out",
            Path::RedisAdmitted => "limit 2: Redis alone, admitted",
            Path::MysqlFresh => "limit 3: MySQL alone, fresh connections",
            Path::MysqlKept => "limit 3: MySQL alone, kept connections",
        }
    }

    /// Whether this is one of the limits rather than a path of the product.
    pub fn is_limit(self) -> bool {
        !matches!(self, Path::SoldOut | Path::Duplicate | Path::Purchase)
    }

    /// The limits a product path cannot beat: each does at least that much work.
    pub fn limits(self) -> &'static [Path] {
        match self {
            Path::SoldOut | Path::Duplicate => {
                &[Path::HostFloor, Path::RedisFloor, Path::RedisSoldOut]
            }
            Path::Purchase => &[
                Path::HostFloor,
                Path::RedisFloor,
                Path::RedisAdmitted,
                Path::MysqlFresh,
            ],
            _ => &[],
        }
    }
}

/// What the load generator saw in one run.
pub struct Run {
    pub requests: u64,
    pub seconds: f64,
    pub latency: Latency,
    /// Status code, or the error code of a 409, or the native call's outcome.
    pub outcomes: BTreeMap<String, u64>,
    /// Connect, read, write and timeout errors seen by wrk.
    pub socket_errors: u64,
}

/// One path at one concurrency level.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measurement {
    pub path: Path,
    pub concurrency: usize,
    pub requests: u64,
    pub seconds: f64,
    pub latency: Latency,
    /// Status code, or the error code of a 409, or the native call's outcome.
    pub outcomes: BTreeMap<String, u64>,
    /// Connect, read, write and timeout errors seen by the load generator.
    pub socket_errors: u64,
    pub server: ServerDelta,
}

impl Measurement {
    pub fn new(path: Path, concurrency: usize, run: Run, server: ServerDelta) -> Measurement {
        Measurement {
            path,
            concurrency,
            requests: run.requests,
            seconds: run.seconds,
            latency: run.latency,
            outcomes: run.outcomes,
            socket_errors: run.socket_errors,
            server,
        }
    }

    /// Answers per second, failures (5xx, or a native call's error) left out: a limit
    /// that fails fast must not look faster for it.
    pub fn throughput(&self) -> f64 {
        (self.requests - failures(&self.outcomes)) as f64 / self.seconds
    }
}

/// 5xx answers and failed native calls.
pub fn failures(outcomes: &BTreeMap<String, u64>) -> u64 {
    outcomes
        .iter()
        .filter(|(outcome, _)| outcome.starts_with('5') || *outcome == "error")
        .map(|(_, n)| n)
        .sum()
}

/// Latency percentiles, in microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Latency {
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Latency {
    /// From samples in microseconds (sorted here).
    pub fn of(samples: &mut [u64]) -> Latency {
        samples.sort_unstable();
        let at = |quantile: f64| -> u64 {
            if samples.is_empty() {
                return 0;
            }
            let rank = (quantile * samples.len() as f64).ceil() as usize;
            samples[rank.clamp(1, samples.len()) - 1]
        };
        Latency {
            p50_us: at(0.50),
            p99_us: at(0.99),
            p999_us: at(0.999),
            max_us: samples.last().copied().unwrap_or(0),
        }
    }
}

/// Path (d): the burst and what it left behind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BurstResult {
    pub buyers: u64,
    pub stock: u64,
    pub requests: u64,
    pub seconds: f64,
    pub latency: Latency,
    pub outcomes: BTreeMap<String, u64>,
    pub server: ServerDelta,
    pub checks: Vec<Check>,
}

/// One invariant, as checked against MySQL and Redis after the burst.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    pub what: String,
    pub expected: String,
    pub found: String,
    pub ok: bool,
}

/// The machine and the software the figures come from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    /// The commit measured, with "+ uncommitted changes" when the tree had any.
    pub commit: String,
    pub cpus: usize,
    pub cpu_model: String,
    pub kernel: String,
    pub redis: String,
    pub mariadb: String,
    pub wrk: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// Unix seconds when the measurements began.
    pub started_at: u64,
    /// The machine's 1-minute load average then: above zero, something else was running.
    pub load_at_start: f64,
    pub machine: Machine,
    pub levels: Vec<usize>,
    pub seconds_per_level: u64,
    pub measurements: Vec<Measurement>,
    pub burst: BurstResult,
    /// Seconds scripts/bench.sh spent before measuring (services, migrations, builds).
    pub setup_seconds: f64,
    /// Seconds `seckill-bench run` took: starting the hosts, setting up and measuring.
    pub run_seconds: f64,
}

impl Results {
    pub fn get(&self, path: Path, concurrency: usize) -> Option<&Measurement> {
        self.measurements
            .iter()
            .find(|m| m.path == path && m.concurrency == concurrency)
    }

    /// All levels of one path, in order.
    pub fn of(&self, path: Path) -> impl Iterator<Item = &Measurement> {
        self.measurements.iter().filter(move |m| m.path == path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_sample_at_or_above_the_rank() {
        let mut samples: Vec<u64> = (1..=1000).rev().collect();
        let latency = Latency::of(&mut samples);
        assert_eq!(
            (
                latency.p50_us,
                latency.p99_us,
                latency.p999_us,
                latency.max_us
            ),
            (500, 990, 999, 1000)
        );
        assert_eq!(Latency::of(&mut []).p99_us, 0);
        assert_eq!(Latency::of(&mut [7]).p50_us, 7);
    }

    #[test]
    fn rejections_and_purchases_are_held_against_their_own_limits() {
        for path in Path::ALL {
            assert_eq!(path.is_limit(), path.limits().is_empty(), "{path:?}");
            assert!(path.limits().iter().all(|limit| limit.is_limit()));
        }
        assert!(Path::Purchase.limits().contains(&Path::MysqlFresh));
        assert!(!Path::SoldOut.limits().contains(&Path::MysqlFresh));
    }
}
