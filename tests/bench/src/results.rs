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
    /// The floor component opening MySQL and running `SELECT 1`, with the component's
    /// MySQL URL (`prefer_socket=false`, as spin.toml's default).
    MysqlFloor,
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
    /// Path (c): distinct buyers on a voucher with stock for all of them, each admitted
    /// and committed to MySQL in a group commit before her 201.
    Purchase,
    /// Path (e): a storefront page polling `GET /vouchers/{id}`.
    Polling,
    /// The floor component's WASIp3 build (runs of the WASIp3 seckill only): one PING on
    /// the Redis connection its instance keeps. Spin's p3 Redis floor.
    P3RedisFloor,
    /// Variant: the p3 floor opening MySQL and running `SELECT 1`, as the p2 floor does.
    P3MysqlFloor,
    /// Variant: the p3 floor running `SELECT 1` on a MySQL connection its instance keeps:
    /// against P3MysqlFloor, what keeping one would save a group commit.
    P3MysqlKept,
}

/// What a measured path is there for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Floor,
    Variant,
    Product,
}

impl Path {
    pub const ALL: [Path; 14] = [
        Path::SpinFloor,
        Path::RedisFloor,
        Path::MysqlFloor,
        Path::FloorVariables,
        Path::Unrouted,
        Path::Malformed,
        Path::Forged,
        Path::SoldOut,
        Path::Duplicate,
        Path::Purchase,
        Path::Polling,
        Path::P3RedisFloor,
        Path::P3MysqlFloor,
        Path::P3MysqlKept,
    ];

    /// The paths a run measures: the p3 floor's only beside the WASIp3 build.
    pub fn measured(p3: bool) -> impl Iterator<Item = Path> {
        Path::ALL
            .into_iter()
            .filter(move |path| p3 || !path.of_p3_floor())
    }

    /// Whether the p3 floor component answers this path.
    pub fn of_p3_floor(self) -> bool {
        matches!(
            self,
            Path::P3RedisFloor | Path::P3MysqlFloor | Path::P3MysqlKept
        )
    }

    pub fn label(self) -> &'static str {
        match self {
            Path::SpinFloor => "Spin floor (no backend)",
            Path::RedisFloor => "Spin Redis floor (PING)",
            Path::MysqlFloor => "Spin MySQL floor (SELECT 1)",
            Path::FloorVariables => "variant: Spin floor + 2 variables",
            Path::Unrouted => "variant: unknown route (404)",
            Path::Malformed => "variant: malformed token (401)",
            Path::Forged => "variant: forged token (401)",
            Path::SoldOut => "(a) sold out",
            Path::Duplicate => "(b) duplicate order",
            Path::Purchase => "(c) purchase",
            Path::Polling => "(e) polling GET /vouchers/{id}",
            Path::P3RedisFloor => "Spin p3 Redis floor (PING, kept connection)",
            Path::P3MysqlFloor => "variant: p3 floor, MySQL (SELECT 1)",
            Path::P3MysqlKept => "variant: p3 floor, SELECT 1 on a kept connection",
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Path::SpinFloor | Path::RedisFloor | Path::MysqlFloor | Path::P3RedisFloor => {
                Kind::Floor
            }
            Path::FloorVariables
            | Path::Unrouted
            | Path::Malformed
            | Path::Forged
            | Path::P3MysqlFloor
            | Path::P3MysqlKept => Kind::Variant,
            _ => Kind::Product,
        }
    }

    /// The Spin floor a product path is held against: every product path opens Redis
    /// and sends at least one command. A purchase also writes MySQL, but in group
    /// commits: one MySQL connection and CALL serve a whole batch of purchases.
    pub fn floor(self) -> Option<Path> {
        match self {
            Path::SoldOut | Path::Duplicate | Path::Polling | Path::Purchase => {
                Some(Path::RedisFloor)
            }
            _ => None,
        }
    }

    /// A second floor shown beside the first, for information only: the purchase's
    /// MySQL floor; the p3 Redis floor, where it was measured, for the others.
    pub fn other_floor(self) -> Option<Path> {
        match self {
            Path::Purchase => Some(Path::MysqlFloor),
            Path::SoldOut | Path::Duplicate | Path::Polling => Some(Path::P3RedisFloor),
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
            Path::Purchase => self.outcomes.get("201").copied().unwrap_or(0),
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

/// Path (f): one shape of the sale clock, a whole sale as its buyers live it, and what
/// it left behind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SaleResult {
    /// The shape's name, e.g. "default".
    pub shape: String,
    pub stock: u64,
    pub buyers: u64,
    /// The units the buyers ask for together (one each, but in a shape of several units
    /// a buyer).
    #[serde(default)]
    pub units_asked: u64,
    pub connections: usize,
    /// Each buyer's first press falls at a uniformly random moment within this many
    /// seconds after the opening.
    pub spread_s: f64,
    /// Spin's Redis floor (wrk, `connections` connections), measured just before.
    pub redis_floor: f64,
    /// Every press, retries included.
    pub presses: u64,
    /// From the opening until the driver received the last 201.
    pub last_unit_s: f64,
    /// From the opening until the last buyer had her final answer.
    pub last_answer_s: f64,
    /// Per press: its latency, from sending to the whole answer.
    pub latency: Latency,
    /// Per press: the status, or for a 409 or 429 its error code; `transport` for a
    /// request that got no HTTP answer.
    pub outcomes: BTreeMap<String, u64>,
    /// Per buyer: the final answer, or `gave up` for a buyer who pressed as often as a
    /// buyer would and had none.
    pub finals: BTreeMap<String, u64>,
    /// Answers per `BIN_S` seconds after the opening, by outcome.
    pub timeline: BTreeMap<String, Vec<u64>>,
    /// The most connections of the component's MySQL user open at once, sampled about
    /// every 20 ms through the sale.
    pub peak_component_connections: u64,
    /// The most MySQL connections open at once on the whole server (`Threads_connected`,
    /// the sampler's own and other clients' included).
    pub peak_threads_connected: u64,
    /// `Threads_connected` just before the opening.
    pub threads_connected_before: u64,
    /// The longest a statement of the component was seen running by the sampler, in ms:
    /// a group commit held up in MySQL shows here.
    #[serde(default)]
    pub longest_statement_ms: u64,
    /// The longest a MySQL connection (anyone's) was seen waiting in its handshake, in ms:
    /// a connection slow to open shows here.
    #[serde(default)]
    pub longest_handshake_ms: u64,
    pub max_connections: u64,
    /// (seconds after the opening, `Threads_connected`, the component's connections).
    pub samples: Vec<(f64, u64, u64)>,
    pub server: ServerDelta,
    /// For a shape run past its payment deadlines: what was paid, expired and sold again.
    #[serde(default)]
    pub resale: Option<Resale>,
    /// For a shape whose buyers told `sold_out` wait in the sale's line: what they did
    /// and what the line handed them.
    #[serde(default)]
    pub line: Option<Line>,
    pub checks: Vec<Check>,
}

/// A sale with a line (docs/design.md, "The line"): each buyer told `sold_out` joins it
/// (`POST /vouchers/{id}/line`) and polls her standing (`GET`) until it hands her an
/// order or the units stop coming back.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Line {
    /// A waiting buyer's next look is sent this long after the last one's answer.
    pub poll_every_ms: u64,
    /// Buyers who joined.
    pub members: u64,
    /// Per request: the status, or the line's `status` (`waiting`, `ordered`,
    /// `not_in_line`), or a 409's or 429's error code.
    pub joins: BTreeMap<String, u64>,
    pub looks: BTreeMap<String, u64>,
    /// When the last look was answered, seconds after the opening.
    pub last_look_s: f64,
    /// Members the line handed an order, as they heard it (`ordered`); of those, heard
    /// only by the look the driver sent for a member who had stopped waiting.
    pub ordered: u64,
    pub heard_after_waiting: u64,
    /// Of those, members whose order had expired before their next look heard of it.
    #[serde(default)]
    pub expired_unheard: u64,
    /// Orders in MySQL no `201` acknowledged: those of members (the line's), and, after
    /// the line's first hand-out, anyone else's or a `201`'s (a unit given back that did
    /// not go to the line). Units given back before it went to buyers pressing (nobody
    /// waited yet): `resold_before_the_line`.
    pub line_orders: u64,
    pub outsiders: u64,
    #[serde(default)]
    pub resold_before_the_line: u64,
    /// Line orders whose member stood in the line as Redis held it just before the first
    /// unit came back (its sorted sets, read once a second until then), and pairs of them
    /// handed against that order (handed order: order ids).
    pub placed: u64,
    pub inversions: u64,
    /// Units given back while members waited (Redis `units:returned` as sampled).
    pub returned_while_waiting: u64,
    /// Per line order heard while waiting: from the moment Redis counted the unit it was
    /// handed (the k-th unit given back, the k-th line order by id) to her `ordered`
    /// answer, in µs (her polling included: the order waits for her next look).
    pub return_to_ordered: Latency,
    /// The times, in seconds after the opening, units were given back: (first, last).
    pub returns_s: (f64, f64),
}

/// A sale run past its payment deadlines: its winners pay at once but for a share who
/// never do, whose orders expire and whose units go back to the buyers still pressing;
/// once every buyer has her answer and the last deadline has passed, the driver expires
/// what is left, as a scheduler would. Orders are counted in MySQL afterwards.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Resale {
    /// The voucher's payment window.
    pub pay_within_s: u64,
    /// The share of buyers drawn never to pay, should they win.
    pub never_pay: f64,
    /// Orders, whatever became of them.
    pub orders_created: u64,
    pub paid: u64,
    pub expired: u64,
    /// Per payment of a winner: the status, or for a 409 its error code; `transport` for
    /// a request that got no HTTP answer.
    pub payments: BTreeMap<String, u64>,
    /// Units the one `POST /vouchers/{id}/expire` after the sale gave back.
    pub returned_at_end: u64,
    /// Units given back to the sale in all (Redis's `units:returned` counter): by the
    /// buyers' presses and by that last expire.
    pub units_returned: u64,
}

impl Resale {
    /// Units sold again after an expiry gave them back.
    pub fn resold(&self, stock: u64) -> u64 {
        self.orders_created.saturating_sub(stock)
    }
}

/// The width of a sale's timeline bins, in seconds.
pub const BIN_S: f64 = 0.1;

impl SaleResult {
    pub fn presses_per_buyer(&self) -> f64 {
        self.presses as f64 / self.buyers.max(1) as f64
    }

    /// (time to the last answer) × (Spin's Redis floor) ÷ buyers: how many times longer
    /// the sale took than Spin could answer each buyer once through Redis.
    pub fn ratio(&self) -> f64 {
        self.last_answer_s * self.redis_floor / self.buyers.max(1) as f64
    }

    /// 201 answers: units the buyers were told they hold.
    pub fn sold(&self) -> u64 {
        self.finals.get("201").copied().unwrap_or(0)
    }

    /// 5xx answers and requests with none, presses and payments alike.
    pub fn failures(&self) -> u64 {
        let failed = |outcomes: &BTreeMap<String, u64>| {
            failures(outcomes) + outcomes.get(TRANSPORT).copied().unwrap_or(0)
        };
        failed(&self.outcomes)
            + self.resale.as_ref().map_or(0, |r| failed(&r.payments))
            + self
                .line
                .as_ref()
                .map_or(0, |l| failed(&l.joins) + failed(&l.looks))
    }

    /// Buyers whose last answer was final: a 201 or a 409 (sold out, already ordered,
    /// ended).
    pub fn answered(&self) -> u64 {
        self.finals
            .iter()
            .filter(|(outcome, _)| FINAL.contains(&outcome.as_str()))
            .map(|(_, n)| n)
            .sum()
    }
}

/// The answers after which a buyer stops pressing.
pub const FINAL: [&str; 4] = ["201", "sold_out", "already_ordered", "ended"];
/// The outcome of a press that got no HTTP answer.
pub const TRANSPORT: &str = "transport";
/// The final outcome of a buyer who ran out of presses.
pub const GAVE_UP: &str = "gave up";

/// One invariant, as checked against MySQL and Redis after the sale.
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
    /// A reduced run (`SECKILL_BENCH_QUICK=1`): a check of the benchmark, not figures.
    #[serde(default)]
    pub quick: bool,
    /// The WASIp3 build was measured (`SECKILL_BUILD=p3`, spin-p3.toml), not the default.
    #[serde(default)]
    pub p3: bool,
    /// Only some shapes of the sale clock were run (`--shapes`), and no path measured.
    #[serde(default)]
    pub only_shapes: bool,
    pub levels: Vec<usize>,
    pub seconds_per_level: u64,
    /// How many rounds the seconds of a level were measured in.
    #[serde(default = "one")]
    pub rounds: u64,
    pub measurements: Vec<Measurement>,
    pub sales: Vec<SaleResult>,
    /// The sold-out path against a baseline build (`--baseline-wasm`), when one was given.
    #[serde(default)]
    pub comparison: Option<Comparison>,
    /// The same shapes of the sale clock on the baseline build, in the same run.
    #[serde(default)]
    pub baseline_sales: Vec<SaleResult>,
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

/// Path (a), sold out, of the component measured against the same path of a baseline
/// build of it (`--baseline-wasm`), both served at once by the same Spin in two `spin up`
/// processes and measured in turns: what the current build's additions cost, or how the
/// WASIp3 build compares with the default one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Comparison {
    /// The baseline's .wasm, as given.
    pub baseline: String,
    /// The path compared (`SECKILL_BENCH_AB_PATH`).
    #[serde(default = "sold_out")]
    pub path: Path,
    pub seconds_per_turn: u64,
    /// The directory under which the launcher's `--log-dir`s are, where Spin writes
    /// each component's stdout (`seckill_stdout.txt`).
    pub log_dir: String,
    /// What each component wrote to its stdout log per answer, over all turns:
    /// (bytes, lines) of the current build, lines of the baseline.
    pub log_bytes_per_request: f64,
    pub log_lines_per_request: f64,
    pub baseline_log_lines_per_request: f64,
    pub rounds: Vec<Round>,
}

/// One round at one level: the current build, the baseline (in alternating order from
/// round to round) and Spin's Redis floor, each for `seconds_per_turn`; beside the
/// WASIp3 build, the p3 floor's too.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Round {
    pub concurrency: usize,
    pub current: Measurement,
    pub baseline: Measurement,
    pub floor: Measurement,
    #[serde(default)]
    pub p3_floor: Option<Measurement>,
}

/// The path a comparison of an earlier run measured: the only one there was.
fn sold_out() -> Path {
    Path::SoldOut
}

impl Round {
    /// The current build's throughput over the baseline's.
    pub fn ratio(&self) -> f64 {
        self.current.throughput() / self.baseline.throughput()
    }
}

impl Comparison {
    pub fn levels(&self) -> Vec<usize> {
        let mut levels: Vec<usize> = self.rounds.iter().map(|r| r.concurrency).collect();
        levels.dedup();
        levels
    }

    pub fn at(&self, level: usize) -> impl Iterator<Item = &Round> {
        self.rounds.iter().filter(move |r| r.concurrency == level)
    }
}

/// The median of some figures (the mean of the middle two of an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
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
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
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
        assert_eq!(Path::Purchase.floor(), Some(Path::RedisFloor));
        assert_eq!(Path::SoldOut.floor(), Some(Path::RedisFloor));
    }
}
