//! seckill-bench: the flash-sale load benchmark under real Spin, side by side with
//! Spin's own floors measured in the same run. `scripts/bench.sh` builds everything and
//! runs `seckill-bench run`; see BENCHMARKS.md for what it measures and why.
//!
//! ```text
//! seckill-bench run      measure, then write DIR/results.json, BENCHMARKS.md, docs/bench.png
//! seckill-bench report   write BENCHMARKS.md and docs/bench.png again from DIR/results.json
//! ```
//! DIR is `bench-out` (or `--out DIR`); run it from the repository root.

mod chart;
mod counters;
mod hosts;
mod report;
mod results;
mod storefront;
mod storm;
mod wrk;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use reqwest::StatusCode;

use counters::{Servers, BENCH_MYSQL_URL};
use hosts::Host;
use results::{Machine, Measurement, Path as BenchPath, Results, StormResult};
use seckill_tests::app::{buyer_token, signed_token};
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
/// The storm (f): twice as many buyers as units, pressing through this many connections.
const STORM_STOCK: u64 = 2000;
const STORM_BUYERS: u64 = 4000;
const STORM_CONNECTIONS: usize = 256;
/// The storm's settings: `prefer_socket=false` or not, and `max_inflight_purchases` when
/// not spin.toml's default. Each setting of the limit doubles as the other's comparison:
/// with two MySQL connections per purchase, 64 in flight nears MariaDB's default
/// max_connections of 151, with one it does not.
const STORMS: [(bool, Option<&str>); 4] = [
    (false, None),
    (true, None),
    (false, Some("64")),
    (true, Some("64")),
];
/// The API's largest stock: enough for every purchase the benchmark makes.
const UNLIMITED_STOCK: u64 = 10_000_000;
/// Buyer tokens for the purchase paths; more than one run can use at the top rate seen here.
const PURCHASE_BUYERS: u64 = 60_000;
/// User 1 orders the sold-out voucher's only unit; user 2 keeps arriving too late.
const FIRST_BUYER: u64 = 1;
const LATE_BUYER: u64 = 2;
/// What the `prefer_socket` comparison adds to the MySQL URL: keep the loopback TCP
/// connection instead of moving to MariaDB's Unix socket.
const TCP_ONLY: &str = "prefer_socket=false";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let out = match (args.next().as_deref(), args.next()) {
        (None, _) => PathBuf::from("bench-out"),
        (Some("--out"), Some(dir)) => PathBuf::from(dir),
        _ => bail!("usage: seckill-bench run|report [--out DIR]"),
    };
    let results = match command.as_str() {
        "run" => {
            std::fs::create_dir_all(&out)?;
            let runtime = tokio::runtime::Runtime::new()?;
            let results = runtime.block_on(run(&out))?;
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
        _ => bail!("usage: seckill-bench run|report [--out DIR]"),
    };
    std::fs::create_dir_all("docs")?;
    chart::draw(&results, Path::new("docs/bench.png"))?;
    std::fs::write("BENCHMARKS.md", report::render(&results))?;
    println!("seckill-bench: wrote BENCHMARKS.md and docs/bench.png");
    let broken: Vec<_> = results
        .storms
        .iter()
        .flat_map(|storm| storm.checks.iter().filter(|c| !c.ok))
        .collect();
    ensure!(broken.is_empty(), "the storm broke invariants: {broken:?}");
    Ok(())
}

async fn run(out: &Path) -> Result<Results> {
    let started = Instant::now();
    let started_at = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let load_at_start = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|load| load.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    // Before measuring, so that the commit named is the one the component was built from.
    let machine = machine().await?;
    storefront::remove_bench_data().await?;
    let mut rig = Rig::set_up(out).await?;

    eprintln!("seckill-bench: warming up every path at {WARM_UP_LEVEL}");
    for path in BenchPath::ALL {
        rig.measure(path, WARM_UP_LEVEL, Duration::from_secs(1))
            .await?;
    }
    // Level by level, every path at one level before the next, so that the paths
    // compared at one level are measured within a minute of each other, in rounds.
    let mut measurements = Vec::new();
    for level in LEVELS {
        let mut rounds: Vec<Vec<Measurement>> = BenchPath::ALL.iter().map(|_| Vec::new()).collect();
        for _ in 0..ROUNDS {
            for (path, runs) in BenchPath::ALL.into_iter().zip(&mut rounds) {
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
    let mut storms = Vec::new();
    for (tcp_only, max_inflight) in STORMS {
        storms.push(rig.storm(tcp_only, max_inflight).await?);
    }
    drop(rig);
    storefront::remove_bench_data().await?;

    Ok(Results {
        started_at,
        load_at_start,
        machine,
        levels: LEVELS.to_vec(),
        seconds_per_level: ROUNDS * SECONDS_PER_ROUND,
        rounds: ROUNDS,
        measurements,
        storms,
        setup_seconds: std::env::var("SECKILL_BENCH_SETUP_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0.0),
        run_seconds: started.elapsed().as_secs_f64(),
    })
}

/// The running applications and the sales every measurement uses.
struct Rig {
    seckill: Host,
    /// The same component with `prefer_socket=false` on its MySQL URL.
    seckill_tcp: Host,
    floor: Host,
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
    /// Users above every token file's, for the storms.
    next_storm_buyer: u64,
}

impl Rig {
    async fn set_up(out: &Path) -> Result<Rig> {
        let tcp_url = format!("{BENCH_MYSQL_URL}?{TCP_ONLY}");
        let seckill = Host::start(Path::new("spin.toml"), &[("mysql_url", BENCH_MYSQL_URL)]);
        let seckill_tcp = Host::start(Path::new("spin.toml"), &[("mysql_url", &tcp_url)]);
        let floor = Host::start(
            Path::new("tests/bench/floor/spin.toml"),
            &[("mysql_url", BENCH_MYSQL_URL)],
        );
        let storefront = Storefront::new(&seckill.base)?;
        let sold_out = storefront.create_voucher(1).await?;
        let (status, body) = storefront.buy(sold_out, FIRST_BUYER).await?;
        ensure!(
            status == StatusCode::CREATED,
            "first purchase: {status} {body}"
        );
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
            seckill_tcp,
            floor,
            storefront,
            servers: Servers::connect().await?,
            scripts: wrk::Scripts::write(out)?,
            tokens,
            forged,
            sold_out,
            next_storm_buyer: FIRST_BUYER + PURCHASE_BUYERS,
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
            BenchPath::MysqlFloorTcp => floor(&format!("/mysql?{TCP_ONLY}")),
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
            BenchPath::Purchase | BenchPath::PurchaseTcp => {
                let base = match path {
                    BenchPath::Purchase => &self.seckill.base,
                    _ => &self.seckill_tcp.base,
                };
                // A new sale per run, so that every buyer in the token file is new to it.
                let sale = self.storefront.create_voucher(UNLIMITED_STOCK).await?;
                target(
                    format!("{base}/vouchers/{sale}/orders"),
                    "POST",
                    wrk::Buyers::Each(self.tokens.clone()),
                )
            }
            BenchPath::Polling => target(
                format!("{}/vouchers/{}", self.seckill.base, self.polled),
                "GET",
                wrk::Buyers::Anonymous,
            ),
        };
        let scripts = &self.scripts;
        let (run, server) = self
            .servers
            .around(wrk::run(scripts, &target, level, time))
            .await?;
        Ok(Measurement::new(path, level, run, server))
    }

    /// The storm (f), on the component with the driver's `prefer_socket` on, or with
    /// `prefer_socket=false` (spin.toml's default), and with spin.toml's `max_inflight_purchases` or another.
    async fn storm(&mut self, tcp_only: bool, max_inflight: Option<&str>) -> Result<StormResult> {
        let tcp_url = format!("{BENCH_MYSQL_URL}?{TCP_ONLY}");
        let url = if tcp_only {
            tcp_url.as_str()
        } else {
            BENCH_MYSQL_URL
        };
        let mut variables = vec![("mysql_url", url)];
        let label = if tcp_only {
            TCP_ONLY
        } else {
            "prefer_socket on"
        };
        let mut setting = vec![label.to_string()];
        if let Some(limit) = max_inflight {
            variables.push(("max_inflight_purchases", limit));
            setting.push(format!("max_inflight_purchases={limit}"));
        }
        let setting = setting.join(", ");
        // The measured paths' Spin processes serve spin.toml's limit; another limit gets
        // a Spin of its own for this storm.
        let own = max_inflight.map(|_| Host::start(Path::new("spin.toml"), &variables));
        let base = match (&own, tcp_only) {
            (Some(host), _) => host.base.clone(),
            (None, true) => self.seckill_tcp.base.clone(),
            (None, false) => self.seckill.base.clone(),
        };
        let voucher_id = self.storefront.create_voucher(STORM_STOCK).await?;
        let first = self.next_storm_buyer;
        self.next_storm_buyer += STORM_BUYERS;
        let buyers: Vec<u64> = (first..first + STORM_BUYERS).collect();
        eprintln!(
            "seckill-bench: storm ({setting}): {STORM_BUYERS} buyers for {STORM_STOCK} units \
             through {STORM_CONNECTIONS} connections"
        );
        let storm = storm::run(
            storm::Storm {
                base: &base,
                setting: &setting,
                voucher_id,
                stock: STORM_STOCK,
                buyers,
                connections: STORM_CONNECTIONS,
            },
            &mut self.servers,
        )
        .await?;
        eprintln!(
            "seckill-bench: storm ({setting}): sold out after {:.2} s, all answered after \
             {:.2} s, peak Threads_connected {}, {:?}",
            storm.sold_out_after, storm.seconds, storm.peak_threads_connected, storm.finals
        );
        Ok(storm)
    }
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
        spin: seckill_tests::spin::version(),
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model,
        kernel,
        redis,
        mariadb,
        wrk,
    })
}
