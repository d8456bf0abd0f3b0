//! seckill-bench: the flash-sale load benchmark under real Spin, side by side with
//! Spin's own floors measured in the same run. `scripts/bench.sh` builds everything and
//! runs `seckill-bench run`; see BENCHMARKS.md for what it measures and why.
//!
//! ```text
//! seckill-bench run      measure, then write DIR/results.json, BENCHMARKS.md and
//!                        docs/{bench,sale-clock}.png
//! seckill-bench report   write BENCHMARKS.md and the charts again from DIR/results.json
//! ```
//! DIR is `bench-out` (or `--out DIR`); run it from the repository root. With
//! `SECKILL_BENCH_QUICK=1`, `run` is a reduced run whose report goes into DIR. With
//! `--baseline-wasm PATH` (or `SECKILL_BENCH_BASELINE_WASM=PATH`), `run` also serves that
//! build of the component beside the current one and compares their sold-out paths (or
//! their purchases, `SECKILL_BENCH_AB_PATH=purchase`) and their sale clocks; a baseline
//! of another schema runs from its own manifest on a database of its own ([`Baseline`]). With `SECKILL_BUILD=p3`, the current build is the WASIp3 one, and the
//! floor component's WASIp3 build (the p3 floor) is served and measured too.

mod chart;
mod counters;
mod hosts;
mod line;
mod report;
mod results;
mod sale_clock;
mod storefront;
mod wrk;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use chrono::{DateTime, Utc};
use reqwest::StatusCode;

use counters::{Servers, BENCH_MYSQL_URL};
use hosts::Host;
use results::{Comparison, Machine, Measurement, Path as BenchPath, Results, Round, SaleResult};
use sale_clock::Shape;
use seckill_tests::drivers::app::{buyer_token, signed_token};
use storefront::Storefront;

/// Concurrency levels: wrk's connections.
const LEVELS: [usize; 4] = [1, 8, 32, 128];
/// Each path is measured at each level in rounds of a second, every path once per round,
/// so that a path and its floor meet the shared machine's other work alike.
const ROUNDS: u64 = 3;
const SECONDS_PER_ROUND: u64 = 1;
/// Every path runs once at this level for a second before measuring: it warms Spin's
/// instance allocation, Redis's script cache and MariaDB's buffer pool.
const WARM_UP_LEVEL: usize = 8;
/// The sale clock's shapes; the first is the default the targets are about.
const SHAPES: [Shape; 7] = [
    DEFAULT_SHAPE,
    Shape {
        name: "scarce",
        stock: 200,
        buyers: 12_000,
        connections: 512,
        spread: Duration::from_millis(500),
        pay_within_s: None,
        never_pay: 0.0,
        per_buyer: 1,
        line: false,
    },
    // A crowd beyond Spin's default instance cap (1,000), served with the settings the
    // project recommends (scripts/common.sh): nothing may answer 5xx or `throttled`.
    Shape {
        name: "crowd",
        stock: 3000,
        buyers: 12_000,
        connections: 1500,
        spread: Duration::from_millis(500),
        pay_within_s: None,
        never_pay: 0.0,
        per_buyer: 1,
        line: false,
    },
    Shape {
        name: "crowd of 3000",
        stock: 3000,
        buyers: 12_000,
        connections: 3000,
        spread: Duration::from_millis(500),
        pay_within_s: None,
        never_pay: 0.0,
        per_buyer: 1,
        line: false,
    },
    Shape {
        name: "trickle",
        stock: 500,
        buyers: 1000,
        connections: 384,
        spread: Duration::from_secs(10),
        pay_within_s: None,
        never_pay: 0.0,
        per_buyer: 1,
        line: false,
    },
    // Winners who never pay: their orders expire and their units go back to the sale,
    // to buyers arriving later, for as long as arrivals span several payment windows.
    Shape {
        name: "abandoned",
        stock: 300,
        buyers: 3000,
        connections: 384,
        spread: Duration::from_secs(14),
        pay_within_s: Some(4),
        never_pay: 0.3,
        per_buyer: 1,
        line: false,
    },
    // The default sale letting a buyer hold up to four units: each asks for 1 to 4, and
    // for what is left when told fewer are (docs/design.md, "Quantities").
    Shape {
        name: "default, 1 to 4 units a buyer",
        per_buyer: 4,
        ..DEFAULT_SHAPE
    },
];

/// The sale clock's default shape, the one the targets are about.
const DEFAULT_SHAPE: Shape = Shape {
    name: "default",
    stock: 3000,
    buyers: 9000,
    connections: 384,
    spread: Duration::from_millis(500),
    pay_within_s: None,
    never_pay: 0.0,
    per_buyer: 1,
    line: false,
};
/// A sale with a line, run alone (`--shapes line`), not in a full run: a buyer told
/// `sold_out` joins the line and looks at her standing every second until it hands her
/// an order. 30 % of winners never pay (the line's winners too), and orders are due 60 s
/// after their commit: 9,000 buyers waiting look every 3 to 15 s (`Retry-After`, at most
/// a quarter of the window), which this host's two cores can serve beside the payments
/// (with 4 s to 30 s, the looks kept the payments past their deadlines). Units come back
/// in waves, a payment window apart, each going to the line and
/// each line winner who never pays leaving hers to the next: units keep coming back over
/// several windows.
const LINE_SHAPE: Shape = Shape {
    name: "line",
    stock: 3000,
    buyers: 12_000,
    connections: 384,
    spread: Duration::from_secs(3),
    pay_within_s: Some(60),
    never_pay: 0.3,
    per_buyer: 1,
    line: true,
};
/// How long Spin's Redis floor is measured just before each sale, at its connections.
const SALE_FLOOR_SECONDS: u64 = 2;
/// A sale opens this many whole seconds ahead (2 to 3 s from its creation), so that every
/// press is timed from the real opening.
const OPENING_AHEAD_S: i64 = 3;
/// The API's largest stock: enough for every purchase the benchmark makes.
const UNLIMITED_STOCK: u64 = 10_000_000;
/// Buyer tokens for the purchase paths; more than one run can use at the top rate seen here.
const PURCHASE_BUYERS: u64 = 60_000;
/// User 1 orders the sold-out voucher's only unit; user 2 keeps arriving too late.
const FIRST_BUYER: u64 = 1;
const LATE_BUYER: u64 = 2;
/// A path compared against a baseline build: at these levels (at every level of the run
/// beside the WASIp3 build), in this many rounds of one turn each (the current build and
/// the baseline in alternating order, then Spin's Redis floors), quick run or not: a cost
/// of a few percent needs the seconds. `SECKILL_BENCH_AB_ROUNDS` and
/// `SECKILL_BENCH_AB_SECONDS` set the rounds and seconds.
const COMPARED_LEVELS: [usize; 2] = [32, 128];
const COMPARED_ROUNDS: usize = 7;
const SECONDS_PER_TURN: usize = 5;
const USAGE: &str =
    "usage: seckill-bench run|report [--out DIR] [--baseline-wasm PATH] [--shapes NAME,...]";

/// A build of seckill to compare this one with. A build of another commit may read other
/// variables or another schema: `SECKILL_BENCH_BASELINE_MANIFEST` serves it from that
/// commit's own spin.toml, and `SECKILL_BENCH_BASELINE_MYSQL_URL` gives it a database of
/// its own (migrated by that commit's `scripts/migrate.sh`, `DB_NAME=...`, its voucher
/// ids started far above this one's, so that the two share Redis without sharing a key:
/// a Redis database of its own would cost it a `SELECT` on every connection). A baseline
/// on its own database runs no sale clock: the sales' checks read this build's.
struct Baseline {
    wasm: PathBuf,
    manifest: Option<PathBuf>,
    mysql_url: Option<String>,
}

impl Baseline {
    fn from_env(wasm: PathBuf) -> Baseline {
        let var = |name| std::env::var(name).ok().filter(|v| !v.is_empty());
        Baseline {
            wasm,
            manifest: var("SECKILL_BENCH_BASELINE_MANIFEST").map(PathBuf::from),
            mysql_url: var("SECKILL_BENCH_BASELINE_MYSQL_URL"),
        }
    }

    /// Whether its sales can be checked as this build's are: it shares the database.
    fn shares_the_database(&self) -> bool {
        self.mysql_url.is_none()
    }
}

/// What one run measures: everything, or with `SECKILL_BENCH_QUICK=1` a reduced run
/// (two levels, one round, sales a tenth the size) that checks the benchmark end to end
/// and writes its report into the output folder instead of the repository.
struct Plan {
    quick: bool,
    levels: Vec<usize>,
    rounds: u64,
    shapes: Vec<Shape>,
    sale_floor: Duration,
    /// A baseline build of the component to compare a path with.
    baseline: Option<Baseline>,
    /// The path compared: the sold-out answer, or a purchase (`SECKILL_BENCH_AB_PATH`).
    compared: BenchPath,
    /// Only these shapes of the sale clock (`--shapes`), and no path measured.
    only_shapes: bool,
}

impl Plan {
    /// `only`: the shapes named by `--shapes`, the line's included, instead of a full run.
    fn from_env(baseline: Option<Baseline>, only: Option<&str>) -> Result<Plan> {
        let compared = match std::env::var("SECKILL_BENCH_AB_PATH").as_deref() {
            Err(_) | Ok("") | Ok("sold_out") => BenchPath::SoldOut,
            Ok("purchase") => BenchPath::Purchase,
            Ok(other) => bail!("SECKILL_BENCH_AB_PATH={other}: sold_out or purchase"),
        };
        let quick = std::env::var("SECKILL_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        // Spin 4.0.2 refuses connections at 3,000 (its own floor included): the WASIp3
        // build, which only it serves, is measured up to the crowd of 1,500.
        let named: Vec<Shape> = match only {
            Some(names) => names
                .split(',')
                .map(|name| {
                    SHAPES
                        .iter()
                        .chain([&LINE_SHAPE])
                        .find(|shape| shape.name == name.trim())
                        .cloned()
                        .with_context(|| format!("--shapes: no shape {name:?}"))
                })
                .collect::<Result<_>>()?,
            None => SHAPES.to_vec(),
        };
        let only_shapes = only.is_some();
        let levels = |levels: Vec<usize>| if only_shapes { Vec::new() } else { levels };
        let shapes = named
            .into_iter()
            .filter(|shape| !seckill_tests::drivers::app::p3() || shape.connections <= 1500);
        if !quick {
            return Ok(Plan {
                quick,
                only_shapes,
                levels: levels(LEVELS.to_vec()),
                rounds: ROUNDS,
                shapes: shapes.collect(),
                sale_floor: Duration::from_secs(SALE_FLOOR_SECONDS),
                baseline,
                compared,
            });
        }
        let shapes = shapes
            .map(|shape| Shape {
                stock: shape.stock / 10,
                buyers: shape.buyers / 10,
                connections: shape.connections / 6,
                // A shape with a payment window keeps arrivals over several windows (or
                // no buyer is left to buy the units that come back): both halved.
                spread: match shape.pay_within_s {
                    Some(_) => shape.spread / 2,
                    None => shape.spread.min(Duration::from_secs(2)),
                },
                pay_within_s: shape.pay_within_s.map(|window| (window / 2).max(1)),
                ..shape.clone()
            })
            .collect();
        Ok(Plan {
            quick,
            only_shapes,
            levels: levels(vec![1, 32]),
            rounds: 1,
            shapes,
            sale_floor: Duration::from_secs(1),
            baseline,
            compared,
        })
    }
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let mut out = PathBuf::from("bench-out");
    let mut baseline = std::env::var_os("SECKILL_BENCH_BASELINE_WASM")
        .filter(|path| !path.is_empty())
        .map(PathBuf::from);
    let mut shapes = None;
    while let Some(option) = args.next() {
        match (option.as_str(), args.next()) {
            ("--out", Some(dir)) => out = PathBuf::from(dir),
            ("--baseline-wasm", Some(wasm)) => baseline = Some(PathBuf::from(wasm)),
            ("--shapes", Some(names)) => shapes = Some(names),
            _ => bail!(USAGE),
        }
    }
    if let Some(wasm) = &baseline {
        ensure!(wasm.is_file(), "no baseline .wasm at {}", wasm.display());
    }
    let results = match command.as_str() {
        "run" => {
            std::fs::create_dir_all(&out)?;
            let runtime = tokio::runtime::Runtime::new()?;
            let plan = Plan::from_env(baseline.map(Baseline::from_env), shapes.as_deref())?;
            let results = runtime.block_on(run(&out, plan))?;
            std::fs::write(
                out.join("results.json"),
                serde_json::to_string_pretty(&results)?,
            )?;
            results
        }
        "report" => {
            let path = out.join("results.json");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("{} (run `seckill-bench run` first)", path.display()))?;
            serde_json::from_str(&text)?
        }
        _ => bail!(USAGE),
    };
    // A run of some shapes alone reports them beside its results, and nothing else.
    if results.only_shapes {
        let path = out.join("sales.md");
        std::fs::write(&path, report::render_sales(&results))?;
        println!("seckill-bench: wrote {}", path.display());
    } else {
        write_report(&results, &out)?;
    }
    let broken: Vec<_> = results
        .sales
        .iter()
        .chain(&results.baseline_sales)
        .flat_map(|sale| sale.checks.iter().filter(|c| !c.ok))
        .collect();
    ensure!(broken.is_empty(), "a sale broke its promises: {broken:?}");
    Ok(())
}

/// BENCHMARKS.md and the charts: a full run's into the repository.
fn write_report(results: &Results, out: &Path) -> Result<()> {
    // A quick run's report stays beside its results, and so does one of the WASIp3 build
    // (`SECKILL_BUILD=p3`); a full run of the default build's is the repository's.
    let root = if results.quick || results.p3 {
        out.to_path_buf()
    } else {
        PathBuf::from(".")
    };
    std::fs::create_dir_all(root.join("docs"))?;
    chart::draw(results, &root.join("docs/bench.png"))?;
    chart::draw_sale(results, &root.join("docs/sale-clock.png"))?;
    std::fs::write(root.join("BENCHMARKS.md"), report::render(results))?;
    println!(
        "seckill-bench: wrote {} and docs/bench.png, docs/sale-clock.png beside it",
        root.join("BENCHMARKS.md").display()
    );
    Ok(())
}

async fn run(out: &Path, plan: Plan) -> Result<Results> {
    let started = Instant::now();
    let started_at = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let load_at_start = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|load| load.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    // Before measuring, so that the commit named is the one the component was built from.
    let machine = machine().await?;
    storefront::remove_bench_data().await?;
    let mut rig = Rig::set_up(out, plan.baseline.as_ref()).await?;

    let p3 = seckill_tests::drivers::app::p3();
    if !plan.only_shapes {
        eprintln!("seckill-bench: warming up every path at {WARM_UP_LEVEL}");
        for path in BenchPath::measured(p3) {
            rig.measure(path, WARM_UP_LEVEL, Duration::from_secs(1))
                .await?;
        }
    }
    // Level by level, every path at one level before the next, so that the paths
    // compared at one level are measured within a minute of each other, in rounds.
    let mut measurements = Vec::new();
    for &level in &plan.levels {
        let mut rounds: Vec<Vec<Measurement>> =
            BenchPath::measured(p3).map(|_| Vec::new()).collect();
        for _ in 0..plan.rounds {
            for (path, runs) in BenchPath::measured(p3).zip(&mut rounds) {
                let time = Duration::from_secs(SECONDS_PER_ROUND);
                runs.push(rig.measure(path, level, time).await?);
            }
        }
        for runs in rounds {
            let m = Measurement::merge(runs);
            let path = m.path;
            eprintln!(
                "seckill-bench: {:<40} {level:>4}: {:>8.0} req/s, p99 {:>8.2} ms, {:?}",
                path.label(),
                m.throughput(),
                m.latency.p99_us as f64 / 1000.0,
                m.outcomes
            );
            measurements.push(m);
        }
    }
    let comparison = match &plan.baseline {
        _ if plan.only_shapes => None,
        // Beside the WASIp3 build, at every level: the builds' ratio is the point.
        Some(baseline) if p3 => Some(rig.compare(baseline, plan.compared, &plan.levels).await?),
        Some(baseline) => Some(
            rig.compare(baseline, plan.compared, &COMPARED_LEVELS)
                .await?,
        ),
        None => None,
    };
    // With a baseline, each shape runs on both builds, in alternating order.
    let (mut sales, mut baseline_sales) = (Vec::new(), Vec::new());
    for (i, shape) in plan.shapes.iter().enumerate() {
        let seed = i as u64 + 1;
        let mut sides = vec![Side::Current];
        if plan
            .baseline
            .as_ref()
            .is_some_and(Baseline::shares_the_database)
        {
            sides.insert(i % 2, Side::Baseline);
        }
        for side in sides {
            let sale = rig.sale(side, shape, plan.sale_floor, seed).await?;
            match side {
                Side::Current => sales.push(sale),
                Side::Baseline => baseline_sales.push(sale),
            }
        }
    }
    // The component's own log (a drain that failed says so there), kept with the results.
    std::fs::write(out.join("seckill.stderr"), rig.seckill.stderr())?;
    drop(rig);
    storefront::remove_bench_data().await?;

    Ok(Results {
        started_at,
        load_at_start,
        machine,
        quick: plan.quick,
        only_shapes: plan.only_shapes,
        p3,
        levels: plan.levels,
        seconds_per_level: plan.rounds * SECONDS_PER_ROUND,
        rounds: plan.rounds,
        measurements,
        sales,
        comparison,
        baseline_sales,
        setup_seconds: std::env::var("SECKILL_BENCH_SETUP_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0.0),
        run_seconds: started.elapsed().as_secs_f64(),
    })
}

/// Which build of seckill a sale runs on.
#[derive(Clone, Copy)]
enum Side {
    Current,
    Baseline,
}

/// A build served beside seckill: its host, a storefront that sells through it, and its
/// own sold-out voucher (one unit, bought by FIRST_BUYER).
struct Served {
    host: Host,
    storefront: Storefront,
    sold_out: u64,
}

/// The running applications and the sales every measurement uses.
struct Rig {
    seckill: Host,
    floor: Host,
    /// The floor component's WASIp3 build, beside seckill's (`SECKILL_BUILD=p3`).
    p3_floor: Option<Host>,
    /// The baseline build, served beside seckill (`--baseline-wasm`).
    baseline: Option<Served>,
    storefront: Storefront,
    servers: Servers,
    scripts: wrk::Scripts,
    tokens: PathBuf,
    /// A buyer's token signed with another secret.
    forged: String,
    /// One unit, bought by FIRST_BUYER: paths (a) and (b) and the token variants.
    sold_out: u64,
    /// A live sale nobody buys: path (e).
    polled: u64,
    /// Users above every token file's, for the sales of the sale clock.
    next_sale_buyer: u64,
}

impl Rig {
    async fn set_up(out: &Path, baseline: Option<&Baseline>) -> Result<Rig> {
        let variables = [("mysql_url", BENCH_MYSQL_URL)];
        let seckill = Host::start(&seckill_tests::drivers::app::manifest(), &variables);
        let floor = Host::start(Path::new("tests/bench/floor/spin.toml"), &variables);
        let p3_floor = seckill_tests::drivers::app::p3()
            .then(|| Host::start(Path::new("tests/bench/floor/spin-p3.toml"), &variables));
        let baseline = match baseline {
            Some(baseline) => {
                let mysql_url = baseline.mysql_url.as_deref().unwrap_or(BENCH_MYSQL_URL);
                let manifest = baseline_manifest(out, baseline)?;
                let host = Host::start(&manifest, &[("mysql_url", mysql_url)]);
                let storefront = Storefront::new(&host.base)?;
                let sold_out = sold_out_voucher(&storefront).await?;
                Some(Served {
                    host,
                    storefront,
                    sold_out,
                })
            }
            None => None,
        };
        let storefront = Storefront::new(&seckill.base)?;
        let sold_out = sold_out_voucher(&storefront).await?;
        let tokens = out.join("buyers.txt");
        storefront::write_tokens(&tokens, FIRST_BUYER..FIRST_BUYER + PURCHASE_BUYERS)?;
        let forged = signed_token(
            "not-the-secret",
            serde_json::json!({ "sub": LATE_BUYER.to_string() }),
            Some(3600),
        );
        Ok(Rig {
            polled: storefront.create_voucher(UNLIMITED_STOCK).await?,
            seckill,
            floor,
            p3_floor,
            baseline,
            storefront,
            servers: Servers::connect().await?,
            scripts: wrk::Scripts::write(out)?,
            tokens,
            forged,
            sold_out,
            next_sale_buyer: FIRST_BUYER + PURCHASE_BUYERS,
        })
    }

    async fn measure(
        &mut self,
        path: BenchPath,
        level: usize,
        time: Duration,
    ) -> Result<Measurement> {
        let target = |url: String, method, buyers| wrk::Target {
            url,
            method,
            buyers,
        };
        let floor = |route: &str| {
            target(
                format!("{}{route}", self.floor.base),
                "GET",
                wrk::Buyers::Anonymous,
            )
        };
        let p3_floor = |route: &str| -> Result<wrk::Target> {
            let host = self.p3_floor.as_ref().context("no p3 floor served")?;
            Ok(target(
                format!("{}{route}", host.base),
                "GET",
                wrk::Buyers::Anonymous,
            ))
        };
        let sold_out = |buyers| {
            target(
                format!("{}/vouchers/{}/orders", self.seckill.base, self.sold_out),
                "POST",
                buyers,
            )
        };
        let target = match path {
            BenchPath::SpinFloor => floor("/"),
            BenchPath::RedisFloor => floor("/redis"),
            BenchPath::MysqlFloor => floor("/mysql"),
            BenchPath::FloorVariables => floor("/variables"),
            BenchPath::Unrouted => target(
                format!("{}/no/such/route", self.seckill.base),
                "GET",
                wrk::Buyers::Anonymous,
            ),
            BenchPath::Malformed => sold_out(wrk::Buyers::One("not-a-token".into())),
            BenchPath::Forged => sold_out(wrk::Buyers::One(self.forged.clone())),
            BenchPath::SoldOut => sold_out(wrk::Buyers::One(buyer_token(LATE_BUYER))),
            BenchPath::Duplicate => sold_out(wrk::Buyers::One(buyer_token(FIRST_BUYER))),
            BenchPath::Purchase => {
                // A new sale per run, so that every buyer in the token file is new to it.
                let sale = self.storefront.create_voucher(UNLIMITED_STOCK).await?;
                target(
                    format!("{}/vouchers/{sale}/orders", self.seckill.base),
                    "POST",
                    wrk::Buyers::Each(self.tokens.clone()),
                )
            }
            BenchPath::Polling => target(
                format!("{}/vouchers/{}", self.seckill.base, self.polled),
                "GET",
                wrk::Buyers::Anonymous,
            ),
            BenchPath::P3RedisFloor => p3_floor("/redis")?,
            BenchPath::P3MysqlFloor => p3_floor("/mysql")?,
            BenchPath::P3MysqlKept => p3_floor("/mysql/kept")?,
        };
        self.wrk(path, &target, level, time).await
    }

    async fn wrk(
        &mut self,
        path: BenchPath,
        target: &wrk::Target,
        level: usize,
        time: Duration,
    ) -> Result<Measurement> {
        let scripts = &self.scripts;
        let (run, server) = self
            .servers
            .around(wrk::run(scripts, target, level, time))
            .await?;
        Ok(Measurement::new(path, level, run, server))
    }

    /// `path` (the sold-out answer or a purchase) of seckill and of the baseline build, in
    /// rounds at each of `levels`: one turn each, in alternating order so that neither
    /// always follows the other, then Spin's Redis floors. Both are served all along, and
    /// the machine's other work meets both alike. A sold-out turn must answer `sold_out`
    /// and nothing else; a purchase turn buys on a voucher of its own, of its own build.
    async fn compare(
        &mut self,
        baseline: &Baseline,
        path: BenchPath,
        levels: &[usize],
    ) -> Result<Comparison> {
        let served = self.baseline.as_ref().context("no baseline served")?;
        let sides = [
            (
                self.seckill.base.clone(),
                self.storefront.clone(),
                self.sold_out,
            ),
            (
                served.host.base.clone(),
                served.storefront.clone(),
                served.sold_out,
            ),
        ];
        let tokens = self.tokens.clone();
        let target = |(base, storefront, sold_out): (String, Storefront, u64)| {
            let tokens = tokens.clone();
            async move {
                let voucher = match path {
                    BenchPath::Purchase => storefront.create_voucher(UNLIMITED_STOCK).await?,
                    _ => sold_out,
                };
                let buyers = match path {
                    BenchPath::Purchase => wrk::Buyers::Each(tokens),
                    _ => wrk::Buyers::One(buyer_token(LATE_BUYER)),
                };
                anyhow::Ok(wrk::Target {
                    url: format!("{base}/vouchers/{voucher}/orders"),
                    method: "POST",
                    buyers,
                })
            }
        };
        for side in &sides {
            let warm_up = target(side.clone()).await?;
            self.wrk(path, &warm_up, WARM_UP_LEVEL, Duration::from_secs(1))
                .await?;
        }
        let [(bytes_before, lines_before), (_, baseline_lines_before)] = self.stdout_logs();
        let setting = |name| std::env::var(name).ok().and_then(|v| v.parse().ok());
        let seconds = setting("SECKILL_BENCH_AB_SECONDS").unwrap_or(SECONDS_PER_TURN);
        let time = Duration::from_secs(seconds as u64);
        let mut rounds = Vec::new();
        for &level in levels {
            for i in 0..setting("SECKILL_BENCH_AB_ROUNDS").unwrap_or(COMPARED_ROUNDS) {
                let mut turns = [None, None];
                for side in [i % 2, 1 - i % 2] {
                    let turn = target(sides[side].clone()).await?;
                    let m = self.wrk(path, &turn, level, time).await?;
                    let expected = match path {
                        BenchPath::Purchase => "201",
                        _ => "sold_out",
                    };
                    ensure!(
                        m.outcomes.keys().all(|outcome| outcome == expected),
                        "{} at {} answered {:?}",
                        path.label(),
                        turn.url,
                        m.outcomes
                    );
                    turns[side] = Some(m);
                }
                let [Some(current), Some(baseline)] = turns else {
                    unreachable!("both sides measured")
                };
                let p3_floor = match self.p3_floor {
                    Some(_) => Some(self.measure(BenchPath::P3RedisFloor, level, time).await?),
                    None => None,
                };
                let round = Round {
                    concurrency: level,
                    floor: self.measure(BenchPath::RedisFloor, level, time).await?,
                    p3_floor,
                    current,
                    baseline,
                };
                eprintln!(
                    "seckill-bench: {}, current vs. baseline {level:>4}, round {}: \
                     {:>6.0} / {:>6.0} req/s = {:.3} (Spin Redis floor {:.0} req/s)",
                    path.label(),
                    i + 1,
                    round.current.throughput(),
                    round.baseline.throughput(),
                    round.ratio(),
                    round.floor.throughput()
                );
                rounds.push(round);
            }
        }
        // What each log gained over the turns, per answer (those still in flight when wrk
        // stopped were answered and logged too, but not counted by wrk).
        let [(bytes, lines), (_, baseline_lines)] = self.stdout_logs();
        let answered = |side: fn(&Round) -> &Measurement| {
            rounds.iter().map(|r| side(r).requests).sum::<u64>().max(1) as f64
        };
        let (current, answered_baseline) = (answered(|r| &r.current), answered(|r| &r.baseline));
        Ok(Comparison {
            baseline: baseline.wasm.display().to_string(),
            path,
            seconds_per_turn: time.as_secs(),
            log_dir: std::env::temp_dir().display().to_string(),
            log_bytes_per_request: (bytes - bytes_before) as f64 / current,
            log_lines_per_request: (lines - lines_before) as f64 / current,
            baseline_log_lines_per_request: (baseline_lines - baseline_lines_before) as f64
                / answered_baseline,
            rounds,
        })
    }

    /// (bytes, lines) seckill and the baseline have written to their stdout logs so far.
    fn stdout_logs(&self) -> [(usize, usize); 2] {
        [
            Some(&self.seckill),
            self.baseline.as_ref().map(|served| &served.host),
        ]
        .map(|host| {
            let log = host.map(Host::stdout_log).unwrap_or_default();
            (log.len(), log.lines().count())
        })
    }

    /// One shape of the sale clock (f) on one build: Spin's Redis floor at the shape's
    /// connections just before, then a voucher opening a few seconds ahead and its buyers.
    async fn sale(
        &mut self,
        side: Side,
        shape: &Shape,
        floor_time: Duration,
        seed: u64,
    ) -> Result<SaleResult> {
        let floor = self
            .measure(BenchPath::RedisFloor, shape.connections, floor_time)
            .await?;
        let redis_floor = floor.throughput();
        let first = self.next_sale_buyer;
        self.next_sale_buyer += shape.buyers;
        let buyers: Vec<(u64, String)> = (first..first + shape.buyers)
            .map(|user| (user, buyer_token(user)))
            .collect();
        let (storefront, build) = match (side, &self.baseline) {
            (Side::Current, _) => (&self.storefront, "this build"),
            (Side::Baseline, Some(served)) => (&served.storefront, "the baseline"),
            (Side::Baseline, None) => bail!("no baseline served"),
        };
        let now = Utc::now();
        let opening_s = now.timestamp() + OPENING_AHEAD_S;
        let opening_at = DateTime::from_timestamp(opening_s, 0).context("opening time")?;
        let voucher_id = storefront
            .create_sale(shape.stock, opening_at, shape.pay_within_s, shape.per_buyer)
            .await?;
        let ahead = (opening_at - Utc::now()).to_std().unwrap_or_default();
        let opening = Instant::now() + ahead;
        eprintln!(
            "seckill-bench: sale clock ({}, {build}): {} units, {} buyers through {} \
             connections, first presses within {:.1} s; Spin Redis floor {redis_floor:.0} \
             req/s at {}",
            shape.name,
            shape.stock,
            shape.buyers,
            shape.connections,
            shape.spread.as_secs_f64(),
            shape.connections
        );
        let result = sale_clock::run(
            sale_clock::Sale {
                storefront,
                shape,
                voucher_id,
                opening,
                buyers,
                redis_floor,
                seed,
            },
            &mut self.servers,
        )
        .await?;
        eprintln!(
            "seckill-bench: sale clock ({}): last unit after {:.2} s, last answer after {:.2} s, \
             {:.2} presses per buyer, ratio {:.2}, peak MySQL connections {} (component) / {} \
             (server), {:?}",
            shape.name,
            result.last_unit_s,
            result.last_answer_s,
            result.presses_per_buyer(),
            result.ratio(),
            result.peak_component_connections,
            result.peak_threads_connected,
            result.outcomes
        );
        if let Some(resale) = &result.resale {
            eprintln!(
                "seckill-bench: sale clock ({}): {} orders created, {} paid, {} expired \
                 ({} by the last expire), {} units resold; payments {:?}",
                shape.name,
                resale.orders_created,
                resale.paid,
                resale.expired,
                resale.returned_at_end,
                resale.resold(shape.stock),
                resale.payments
            );
        }
        if let Some(line) = &result.line {
            eprintln!(
                "seckill-bench: sale clock ({}): line of {} members, {} handed ({} heard \
                 after waiting), {} outsiders, {} inversions of {} placed; joins {:?}, looks \
                 {:?}; return to ordered p50 {:.2} s, p99 {:.2} s, max {:.2} s",
                shape.name,
                line.members,
                line.line_orders,
                line.heard_after_waiting,
                line.outsiders,
                line.inversions,
                line.placed,
                line.joins,
                line.looks,
                line.return_to_ordered.p50_us as f64 / 1e6,
                line.return_to_ordered.p99_us as f64 / 1e6,
                line.return_to_ordered.max_us as f64 / 1e6,
            );
        }
        for check in result.checks.iter().filter(|c| !c.ok) {
            eprintln!(
                "seckill-bench: sale clock ({}): BROKEN {check:?}",
                shape.name
            );
        }
        Ok(result)
    }
}

/// The baseline's manifest (its own, or this spin.toml) with its .wasm as seckill's
/// source (this checkout's other sources made absolute), written into the output folder.
fn baseline_manifest(out: &Path, baseline: &Baseline) -> Result<PathBuf> {
    let seckill = r#"source = "target/wasm32-wasip1/release/seckill.wasm""#;
    let own = baseline
        .manifest
        .as_deref()
        .unwrap_or(Path::new("spin.toml"));
    let manifest = std::fs::read_to_string(own).with_context(|| own.display().to_string())?;
    ensure!(
        manifest.contains(seckill),
        "{} has no `{seckill}`",
        own.display()
    );
    let root = std::env::current_dir()?;
    let wasm = baseline.wasm.canonicalize()?;
    let manifest = manifest
        .replace(
            seckill,
            &format!("source = {:?}", wasm.display().to_string()),
        )
        .replace(
            r#"source = "target/"#,
            &format!(r#"source = "{}/target/"#, root.display()),
        );
    let path = out.join("baseline-spin.toml");
    std::fs::write(&path, manifest)?;
    Ok(path)
}

/// A voucher of one unit, bought by FIRST_BUYER: the sold-out path's, on `storefront`.
async fn sold_out_voucher(storefront: &Storefront) -> Result<u64> {
    let sold_out = storefront.create_voucher(1).await?;
    let (status, body) = storefront.buy(sold_out, FIRST_BUYER).await?;
    ensure!(
        status == StatusCode::CREATED,
        "first purchase: {status} {body}"
    );
    Ok(sold_out)
}

/// `git describe`-like: the short commit, and whether the work tree differed from it.
fn commit() -> Result<String> {
    let git = |args: &[&str]| -> Result<String> {
        let out = std::process::Command::new("git").args(args).output()?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    let changed = git(&["status", "--porcelain", "--untracked-files=no"])?;
    Ok(if changed.is_empty() {
        commit
    } else {
        format!("{commit} + uncommitted changes")
    })
}

/// The machine and the versions of what ran on it.
async fn machine() -> Result<Machine> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, model)| model.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let mut servers = Servers::connect().await?;
    let (redis, mariadb) = servers.versions().await?;
    // wrk prints its version on the first line of its usage text.
    let wrk = std::process::Command::new("wrk")
        .arg("--version")
        .output()?;
    let wrk = String::from_utf8_lossy(&wrk.stdout)
        .lines()
        .next()
        .and_then(|line| line.split(" Copyright").next())
        .unwrap_or("wrk")
        .to_string();
    Ok(Machine {
        commit: commit()?,
        spin: seckill_tests::servers::spin::version(),
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model,
        kernel,
        redis,
        mariadb,
        wrk,
    })
}
