//! What one run measured, saved as `results.json` so the report and the chart can be
//! drawn again from the same figures (`seckill-bench report`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::counters::ServerDelta;

/// Everything that is measured at each concurrency level: the component's paths, Spin's
/// floors they are held against, and variants of the component that tell where the time
/// between the two goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Path {
    /// The floor component answering at once: Spin's floor, no backend, no variable.
    SpinFloor,
    /// The floor component opening Redis and sending one PING.
    RedisFloor,
    /// The floor component opening MySQL and running `SELECT 1`.
    MysqlFloor,
    /// The same with `prefer_socket=false` on the MySQL URL: one TCP connection.
    MysqlFloorTcp,
    /// Variant: the floor component reading two variables, then answering as SpinFloor.
    FloorVariables,
    /// Variant: the component's 404 for an unknown route, no variable, no backend. Against
    /// SpinFloor it tells what the component's larger instance costs.
    Unrouted,
    /// Variant: a purchase with a token that is not a JWT: 401 after reading two
    /// variables, before any signature is checked.
    Malformed,
    /// Variant: a purchase with a well-formed token signed with another secret: 401 after
    /// the HS256 signature is checked.
    Forged,
    /// Path (a): a buyer who never ordered, on a sold-out voucher.
    SoldOut,
    /// Path (b): a buyer who already ordered, trying again.
    Duplicate,
    /// Path (c): distinct buyers on a voucher with stock for all of them.
    Purchase,
    /// Path (c) with `prefer_socket=false` on the component's MySQL URL.
    PurchaseTcp,
    /// Path (e): a storefront page polling `GET /vouchers/{id}`.
    Polling,
}

/// What a measured path is there for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Floor,
    Variant,
    Product,
}

impl Path {
    pub const ALL: [Path; 13] = [
        Path::SpinFloor,
        Path::RedisFloor,
        Path::MysqlFloor,
        Path::MysqlFloorTcp,
        Path::FloorVariables,
        Path::Unrouted,
        Path::Malformed,
        Path::Forged,
        Path::SoldOut,
        Path::Duplicate,
        Path::Purchase,
        Path::PurchaseTcp,
        Path::Polling,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Path::SpinFloor => "Spin floor (no backend)",
            Path::RedisFloor => "Spin Redis floor (PING)",
            Path::MysqlFloor => "Spin MySQL floor (SELECT 1)",
            Path::MysqlFloorTcp => "Spin MySQL floor, prefer_socket=false",
            Path::FloorVariables => "variant: Spin floor + 2 variables",
            Path::Unrouted => "variant: unknown route (404)",
            Path::Malformed => "variant: malformed token (401)",
            Path::Forged => "variant: forged token (401)",
            Path::SoldOut => "(a) sold out",
            Path::Duplicate => "(b) duplicate order",
            Path::Purchase => "(c) purchase",
            Path::PurchaseTcp => "(c) purchase, prefer_socket=false",
            Path::Polling => "(e) polling GET /vouchers/{id}",
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Path::SpinFloor | Path::RedisFloor | Path::MysqlFloor | Path::MysqlFloorTcp => {
                Kind::Floor
            }
            Path::FloorVariables | Path::Unrouted | Path::Malformed | Path::Forged => Kind::Variant,
            _ => Kind::Product,
        }
    }

    /// The Spin floor a product path is held against: it does at least that floor's work.
    pub fn floor(self) -> Option<Path> {
        match self {
            Path::SoldOut | Path::Duplicate | Path::Polling => Some(Path::RedisFloor),
            Path::Purchase => Some(Path::MysqlFloor),
            Path::PurchaseTcp => Some(Path::MysqlFloorTcp),
            _ => None,
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

    /// One path's rounds at one level as one measurement: counts and seconds added up;
    /// each latency percentile the median of the rounds' (the rounds' samples are not
    /// kept), the maximum the largest.
    pub fn merge(runs: Vec<Measurement>) -> Measurement {
        let median = |pick: fn(&Latency) -> u64| {
            let mut values: Vec<u64> = runs.iter().map(|m| pick(&m.latency)).collect();
            values.sort_unstable();
            values[values.len() / 2]
        };
        let latency = Latency {
            p50_us: median(|l| l.p50_us),
            p99_us: median(|l| l.p99_us),
            p999_us: median(|l| l.p999_us),
            max_us: runs.iter().map(|m| m.latency.max_us).max().unwrap_or(0),
        };
        let mut merged = runs[0].clone();
        merged.latency = latency;
        for m in &runs[1..] {
            merged.requests += m.requests;
            merged.seconds += m.seconds;
            merged.socket_errors += m.socket_errors;
            for (outcome, n) in &m.outcomes {
                *merged.outcomes.entry(outcome.clone()).or_default() += n;
            }
            merged.server.add(&m.server);
        }
        merged
    }

    /// Answers per second, failures (5xx) left out: a floor that fails fast must not
    /// look faster for it. A purchase path counts only purchases made (201): a buyer
    /// told `throttled` has not bought.
    pub fn throughput(&self) -> f64 {
        let answered = match self.path {
            Path::Purchase | Path::PurchaseTcp => self.outcomes.get("201").copied().unwrap_or(0),
            _ => self.requests - failures(&self.outcomes),
        };
        answered as f64 / self.seconds
    }
}

/// 5xx answers.
pub fn failures(outcomes: &BTreeMap<String, u64>) -> u64 {
    outcomes
        .iter()
        .filter(|(outcome, _)| outcome.starts_with('5'))
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

/// Path (f): the storm and what it left behind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StormResult {
    /// The component's settings: `prefer_socket=false` or not, `max_inflight_purchases`.
    pub setting: String,
    pub buyers: u64,
    pub stock: u64,
    pub connections: usize,
    /// Every attempt, retries included.
    pub attempts: u64,
    /// From the release until every buyer had a final answer.
    pub seconds: f64,
    /// From the release until the last 201 arrived.
    pub sold_out_after: f64,
    /// Per attempt.
    pub latency: Latency,
    /// Per attempt: the status, or for a 409 or 429 its error code.
    pub outcomes: BTreeMap<String, u64>,
    /// Per buyer: the last answer.
    pub finals: BTreeMap<String, u64>,
    /// The most MySQL connections open at once (`Threads_connected`, other clients of the
    /// shared server included), sampled through the storm.
    pub peak_threads_connected: u64,
    /// The most connections of the benchmark's MySQL user open at once: the component's.
    #[serde(default)]
    pub peak_bench_connections: u64,
    /// MySQL connections open just before the release (the benchmark's own among them).
    pub threads_connected_before: u64,
    pub max_connections: u64,
    /// Seconds after the release at which each 201 arrived, in order.
    pub sold_at: Vec<f64>,
    /// (seconds after the release, the component's MySQL connections), sampled through
    /// the storm.
    pub threads: Vec<(f64, u64)>,
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
    /// `spin --version`.
    pub spin: String,
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
    /// How many rounds the seconds of a level were measured in.
    #[serde(default = "one")]
    pub rounds: u64,
    pub measurements: Vec<Measurement>,
    pub storms: Vec<StormResult>,
    /// Seconds scripts/bench.sh spent before measuring (services, migrations, builds).
    pub setup_seconds: f64,
    /// Seconds `seckill-bench run` took: starting Spin, setting up and measuring.
    pub run_seconds: f64,
}

fn one() -> u64 {
    1
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
    fn product_paths_are_held_against_spin_floors() {
        for path in Path::ALL {
            assert_eq!(
                path.kind() == Kind::Product,
                path.floor().is_some(),
                "{path:?}"
            );
            assert!(path.floor().is_none_or(|floor| floor.kind() == Kind::Floor));
        }
        assert_eq!(Path::Purchase.floor(), Some(Path::MysqlFloor));
        assert_eq!(Path::SoldOut.floor(), Some(Path::RedisFloor));
    }
}
