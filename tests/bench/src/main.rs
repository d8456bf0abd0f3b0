//! seckill-bench: the flash-sale load benchmark, side by side with the limits of its
//! parts. `scripts/bench.sh` builds everything and runs `seckill-bench run`; see
//! BENCHMARKS.md for what it measures and why.
//!
//! ```text
//! seckill-bench run      measure, then write DIR/results.json, BENCHMARKS.md, docs/bench.png
//! seckill-bench report   write BENCHMARKS.md and docs/bench.png again from DIR/results.json
//! ```
//! DIR is `bench-out` (or `--out DIR`); run it from the repository root.

mod burst;
mod chart;
mod counters;
mod hosts;
mod limits;
mod report;
mod results;
mod storefront;
mod wrk;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use reqwest::StatusCode;

use counters::Servers;
use hosts::Host;
use limits::{Admission, Buyer, Ids};
use results::{BurstResult, Machine, Measurement, Path as BenchPath, Results};
use seckill_tests::app::buyer_token;
use storefront::Storefront;

/// Concurrency levels: connections for wrk, workers for the native loops.
const LEVELS: [usize; 4] = [1, 8, 32, 128];
const SECONDS_PER_LEVEL: u64 = 3;
/// Every path runs once at this level for a second before measuring: it warms the
/// host's instance allocation, Redis's script cache and MariaDB's buffer pool.
const WARM_UP_LEVEL: usize = 8;
/// The burst: many more buyers than units. The stock is kept small enough that the
/// admitted buyers' MySQL connections (two each, see BENCHMARKS.md) stay within
/// MariaDB's default max_connections of 151 even if all are admitted at once.
const BURST_BUYERS: u64 = 2000;
const BURST_STOCK: u64 = 50;
/// The API's largest stock: enough for every purchase the benchmark makes.
const UNLIMITED_STOCK: u64 = 10_000_000;
/// Buyer tokens for the purchase path; more than it can use at the top rate seen here.
const PURCHASE_BUYERS: u64 = 60_000;
/// User 1 orders the sold-out voucher's only unit; user 2 keeps arriving too late.
const FIRST_BUYER: u64 = 1;
const LATE_BUYER: u64 = 2;

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
    let broken: Vec<_> = results.burst.checks.iter().filter(|c| !c.ok).collect();
    ensure!(broken.is_empty(), "the burst broke invariants: {broken:?}");
    Ok(())
}

async fn run(out: &Path) -> Result<Results> {
    let started = Instant::now();
    let started_at = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let load_at_start = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|load| load.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    storefront::remove_bench_data().await?;
    let mut rig = Rig::set_up(out).await?;

    eprintln!("seckill-bench: warming up every path at {WARM_UP_LEVEL}");
    for path in BenchPath::ALL {
        rig.measure(path, WARM_UP_LEVEL, Duration::from_secs(1))
            .await?;
    }
    // Level by level, every path at one level before the next, so that the paths
    // compared at one level are measured minutes apart at most.
    let mut measurements = Vec::new();
    for level in LEVELS {
        for path in BenchPath::ALL {
            let m = rig
                .measure(path, level, Duration::from_secs(SECONDS_PER_LEVEL))
                .await?;
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
    let burst = rig.burst().await?;
    drop(rig);
    storefront::remove_bench_data().await?;

    Ok(Results {
        started_at,
        load_at_start,
        machine: machine().await?,
        levels: LEVELS.to_vec(),
        seconds_per_level: SECONDS_PER_LEVEL,
        measurements,
        burst,
        setup_seconds: std::env::var("SECKILL_BENCH_SETUP_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0.0),
        run_seconds: started.elapsed().as_secs_f64(),
    })
}

/// The running hosts and the sales every measurement uses.
struct Rig {
    seckill: Host,
    redis_floor: Host,
    storefront: Storefront,
    servers: Servers,
    scripts: wrk::Scripts,
    tokens: PathBuf,
    admission_sha: String,
    /// One unit, bought by FIRST_BUYER: paths (a) and (b).
    sold_out: u64,
    /// Unlimited stock, for the admitted case of the admission script alone.
    redis_sale: u64,
    /// Unlimited stock, for the purchase's CALL alone.
    mysql_sale: u64,
    /// Buyers (and order ids) of the native loops: far above the storefront's users, and
    /// with bit 63 set, which the component's order ids never have.
    native_ids: Ids,
}

impl Rig {
    async fn set_up(out: &Path) -> Result<Rig> {
        let seckill = Host::start(Path::new("spin.toml"), &[]);
        let redis_floor = Host::start(Path::new("tests/bench/redis-floor/spin.toml"), &[]);
        let storefront = Storefront::new(&seckill.base)?;
        let sold_out = storefront.create_voucher(1).await?;
        let (status, body) = storefront.buy(sold_out, FIRST_BUYER).await?;
        ensure!(
            status == StatusCode::CREATED,
            "first purchase: {status} {body}"
        );
        let tokens = out.join("buyers.txt");
        storefront::write_tokens(&tokens, FIRST_BUYER..FIRST_BUYER + PURCHASE_BUYERS)?;
        let unix = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
        Ok(Rig {
            redis_sale: storefront.create_voucher(UNLIMITED_STOCK).await?,
            mysql_sale: storefront.create_voucher(UNLIMITED_STOCK).await?,
            seckill,
            redis_floor,
            storefront,
            servers: Servers::connect().await?,
            scripts: wrk::Scripts::write(out)?,
            tokens,
            admission_sha: limits::load_admission_script().await?,
            sold_out,
            native_ids: Ids::starting_at((1 << 63) + (unix << 20)),
        })
    }

    fn orders_url(&self, voucher_id: u64) -> String {
        format!("{}/vouchers/{voucher_id}/orders", self.seckill.base)
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
        let http = match path {
            BenchPath::HostFloor => Some(target(
                format!("{}/no/such/route", self.seckill.base),
                "GET",
                wrk::Buyers::Anonymous,
            )),
            BenchPath::RedisFloor => Some(target(
                format!("{}/ping", self.redis_floor.base),
                "GET",
                wrk::Buyers::Anonymous,
            )),
            BenchPath::FloorComponent => Some(target(
                format!("{}/no/such/route", self.redis_floor.base),
                "GET",
                wrk::Buyers::Anonymous,
            )),
            BenchPath::SoldOut => Some(target(
                self.orders_url(self.sold_out),
                "POST",
                wrk::Buyers::One(buyer_token(LATE_BUYER)),
            )),
            BenchPath::Duplicate => Some(target(
                self.orders_url(self.sold_out),
                "POST",
                wrk::Buyers::One(buyer_token(FIRST_BUYER)),
            )),
            BenchPath::Purchase => {
                // A new sale per run, so that every buyer in the token file is new to it.
                let sale = self.storefront.create_voucher(UNLIMITED_STOCK).await?;
                Some(target(
                    self.orders_url(sale),
                    "POST",
                    wrk::Buyers::Each(self.tokens.clone()),
                ))
            }
            _ => None,
        };
        if let Some(target) = http {
            let scripts = &self.scripts;
            let (run, server) = self
                .servers
                .around(wrk::run(scripts, &target, level, time))
                .await?;
            return Ok(Measurement::new(path, level, run, server));
        }
        let (run, server) = match path {
            BenchPath::RedisSoldOut => {
                let workers = self
                    .admission_workers(level, self.sold_out, Buyer::Same(LATE_BUYER))
                    .await;
                self.servers
                    .around(limits::closed_loop(workers, time))
                    .await?
            }
            BenchPath::RedisAdmitted => {
                let buyer = Buyer::Each(self.native_ids.clone());
                let workers = self.admission_workers(level, self.redis_sale, buyer).await;
                self.servers
                    .around(limits::closed_loop(workers, time))
                    .await?
            }
            BenchPath::MysqlFresh => {
                let workers = (0..level)
                    .map(|_| limits::Purchase::fresh(self.mysql_sale, self.native_ids.clone()))
                    .collect::<Result<Vec<_>>>()?;
                self.servers
                    .around(limits::closed_loop(workers, time))
                    .await?
            }
            BenchPath::MysqlKept => {
                let mut workers = Vec::new();
                for _ in 0..level {
                    workers.push(
                        limits::Purchase::kept(self.mysql_sale, self.native_ids.clone()).await?,
                    );
                }
                self.servers
                    .around(limits::closed_loop(workers, time))
                    .await?
            }
            _ => unreachable!("HTTP paths are measured above"),
        };
        Ok(Measurement::new(path, level, run, server))
    }

    async fn admission_workers(
        &self,
        level: usize,
        voucher_id: u64,
        buyer: Buyer,
    ) -> Vec<Admission> {
        let mut workers = Vec::new();
        for _ in 0..level {
            workers.push(Admission::connect(&self.admission_sha, voucher_id, buyer.clone()).await);
        }
        workers
    }

    async fn burst(&mut self) -> Result<BurstResult> {
        let voucher_id = self.storefront.create_voucher(BURST_STOCK).await?;
        // Users above the purchase path's, so that none has a token in use elsewhere.
        let first = FIRST_BUYER + PURCHASE_BUYERS;
        let buyers: Vec<u64> = (first..first + BURST_BUYERS).collect();
        eprintln!(
            "seckill-bench: burst: {BURST_BUYERS} buyers x 2 attempts at once for {BURST_STOCK} units"
        );
        let base = self.seckill.base.clone();
        let (answers, server) = self
            .servers
            .around(burst::run(&base, voucher_id, &buyers))
            .await?;
        let checks = burst::check(voucher_id, BURST_STOCK, &answers).await;
        Ok(BurstResult {
            buyers: BURST_BUYERS,
            stock: BURST_STOCK,
            requests: answers.requests,
            seconds: answers.seconds,
            latency: answers.latency,
            outcomes: answers.outcomes,
            server,
            checks,
        })
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
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model,
        kernel,
        redis,
        mariadb,
        wrk,
    })
}
