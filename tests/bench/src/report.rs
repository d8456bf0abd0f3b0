//! BENCHMARKS.md, rendered from one run's results: the targets with the measured figure
//! beside each, the round trips read from the servers, each path as a fraction of its
//! Spin floor, where the time goes (from the variants), every path at every level, and
//! the sale clock with its invariants. The reasoning that does not change from run to
//! run is in `tests/bench/analysis.md`.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::counters::{
    script_commands, ServerDelta, PUBLISH_MARK, USER_CONNECTIONS, USER_STATEMENTS,
};
use crate::results::{
    median, Comparison, Latency, Measurement, Path, Resale, Results, Round, SaleResult,
};

const ANALYSIS: &str = include_str!("../analysis.md");

/// Thresholds from the issues: sold-out and purchase throughput against Spin's Redis
/// floor, polling throughput against the sold-out path.
const SOLD_OUT_OF_REDIS_FLOOR: f64 = 0.90;
const PURCHASE_OF_REDIS_FLOOR: f64 = 0.45;
const POLLING_OF_SOLD_OUT: f64 = 0.90;
/// At most this many MySQL connections of the component open at once in a sale.
const SALE_MYSQL_CONNECTIONS: u64 = 8;
/// A lone buyer's purchase latency at one connection: (p50, p99) at most these, in µs.
const LONE_BUYER_US: (u64, u64) = (2_000, 5_000);

/// What a shape of the sale clock must meet beyond the sale's promises: (time to the last
/// answer) × (Spin's Redis floor) ÷ buyers and presses per buyer at most these.
struct SaleBar {
    ratio: f64,
    presses: f64,
}

/// The default and scarce shapes, and the crowds above Spin's default instance cap (which
/// must also never hear `throttled`); the other shapes keep the promises only.
fn sale_bar(shape: &str) -> Option<SaleBar> {
    match shape {
        "default" | "scarce" => Some(SaleBar {
            ratio: 1.5,
            presses: 1.5,
        }),
        "crowd" | "crowd of 3000" => Some(SaleBar {
            ratio: 2.0,
            presses: 1.1,
        }),
        _ => None,
    }
}
/// The most a change may cost the path compared with a baseline build: its throughput at
/// most this fraction below the baseline's.
const BASELINE_COST: f64 = 0.05;
/// Beside the WASIp3 build: the least its sold-out answer may be, as a multiple of Spin's
/// p2 Redis floor at SATURATED and above, and the most new Redis connections it may make
/// per answer.
const P3_OF_P2_REDIS_FLOOR: f64 = 1.5;
const P3_REDIS_CONNECTIONS: f64 = 0.05;
/// The concurrency from which the machine's two cores are kept busy, so that
/// 1 / throughput is machine time per request.
const SATURATED: usize = 32;

pub fn render(results: &Results) -> String {
    let mut md = String::new();
    header(&mut md, results);
    targets(&mut md, results);
    before_and_after(&mut md, results);
    round_trips(&mut md, results);
    fractions(&mut md, results);
    costs(&mut md, results);
    match &results.comparison {
        Some(comparison) if results.p3 => two_builds(&mut md, results, comparison),
        Some(comparison) => against_baseline(&mut md, comparison),
        None => {}
    }
    levels(&mut md, results);
    sale_clock(&mut md, results);
    md.push_str(ANALYSIS);
    md
}

/// A run of some shapes alone (`--shapes`): their sale clock tables, and the line's.
pub fn render_sales(results: &Results) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Sales alone\n\n`seckill-bench run --shapes`, commit {}, {}.\n",
        results.machine.commit, results.machine.spin
    );
    sale_clock(&mut md, results);
    lines(&mut md, results);
    md
}

/// The shapes whose buyers wait in the sale's line: what they sent and what it did.
fn lines(md: &mut String, r: &Results) {
    md.push_str(
        "| shape | members | looks every | joins | looks (per member) | handed (heard after \
         waiting) | given back while waiting (first, last) | given back → `ordered` p50 / \
         p99 / max | inversions of placed | outsiders |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for sale in &r.sales {
        let Some(line) = &sale.line else { continue };
        let looks: u64 = line.looks.values().sum();
        let t = &line.return_to_ordered;
        let _ = writeln!(
            md,
            "| {} | {} | {} ms | {} | {} ({:.1}) | {} ({}) | {} ({:.1} s, {:.1} s) | \
             {:.2} / {:.2} / {:.2} s | {} of {} | {} |",
            sale.shape,
            line.members,
            line.poll_every_ms,
            outcome_list(&line.joins),
            outcome_list(&line.looks),
            looks as f64 / line.members.max(1) as f64,
            line.line_orders,
            line.heard_after_waiting,
            line.returned_while_waiting,
            line.returns_s.0,
            line.returns_s.1,
            t.p50_us as f64 / 1e6,
            t.p99_us as f64 / 1e6,
            t.max_us as f64 / 1e6,
            line.inversions,
            line.placed,
            line.outsiders,
        );
    }
}

fn header(md: &mut String, r: &Results) {
    let m = &r.machine;
    let when = chrono::DateTime::from_timestamp(r.started_at as i64, 0)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_default();
    let levels: Vec<String> = r.levels.iter().map(ToString::to_string).collect();
    let shapes: Vec<String> = r
        .sales
        .iter()
        .map(|sale| {
            let payment = sale.resale.as_ref().map_or(String::new(), |resale| {
                format!(
                    ", {} s to pay, {:.0} % never pay",
                    resale.pay_within_s,
                    resale.never_pay * 100.0
                )
            });
            format!(
                "{} ({} units, {} buyers, {:.1} s spread{payment})",
                sale.shape, sale.stock, sale.buyers, sale.spread_s
            )
        })
        .collect();
    if r.p3 {
        md.push_str(
            "> **The WASIp3 build** (`SECKILL_BUILD=p3`: spin-p3.toml, served with Spin's \
             own instance reuse, many requests at once per instance) in place of the default one as seckill, beside the floor \
             component's two builds (Spin's p2 floor, and the p3 floor: *Spin p3* and *p3 \
             floor* paths) and, with `--baseline-wasm`, the default build (*The two \
             builds*): each in a `spin up` of its own.\n\n",
        );
    }
    if r.quick {
        md.push_str(
            "> **Quick run** (`SECKILL_BENCH_QUICK=1`): a check that the benchmark works end \
             to end, with fewer levels, one round and small sales. Not figures to quote.\n\n",
        );
    }
    let _ = write!(
        md,
        "# Benchmarks\n\n\
         Written by `scripts/bench.sh` ({when}, commit {commit}); edit `tests/bench/` rather \
         than this file. \
         Every figure below comes from that one run, under real Spin: `{spin}`.\n\n\
         **Machine.** {cpus} × {cpu}, Linux {kernel}; Redis {redis}, MariaDB {mariadb}, {wrk}. \
         A 2-core *shared* machine: the load generator, Spin, Redis and MariaDB \
         all run on the same two cores, beside whatever else the machine is doing (its 1-minute \
         load average was {load:.1} when this run began). Absolute \
         figures move from run to run; read them as ratios within one run, where all paths \
         and floors at one level were measured within a minute of each other.\n\n\
         **Run.** `scripts/bench.sh` took {total:.0} s: {setup:.0} s for services, migrations \
         and (incremental) builds, {run:.0} s starting Spin and measuring. Two `spin up` \
         processes: seckill and the floor component (`tests/bench/floor`), both with \
         spin.toml's default MySQL options (`prefer_socket=false`, and `max_allowed_packet` \
         and `wait_timeout`, so that the driver asks the server for neither) and the \
         project's instance cap (`SPIN_MAX_INSTANCE_COUNT=5000`). Concurrency levels \
         {levels}, {secs} s each, level by level (every path at one level before the next), \
         in {rounds} rounds of {round} s (every path once per round), after a \
         1 s warm-up of every path; then the sale clock (f): {shapes}, each just after Spin's \
         Redis floor at its connections; loopback only.\n\n\
         ![Throughput and p99 latency against concurrency, one line per path](docs/bench.png)\n\n",
        commit = m.commit,
        spin = m.spin,
        cpus = m.cpus,
        cpu = m.cpu_model,
        kernel = m.kernel,
        redis = m.redis,
        mariadb = m.mariadb,
        wrk = m.wrk,
        load = r.load_at_start,
        total = r.setup_seconds + r.run_seconds,
        setup = r.setup_seconds,
        run = r.run_seconds,
        levels = levels.join(", "),
        secs = r.seconds_per_level,
        rounds = r.rounds,
        round = r.seconds_per_level / r.rounds.max(1),
        shapes = shapes.join("; "),
    );
}

/// A path's throughput over another's, at every level both were measured.
fn ratios(r: &Results, path: Path, limit: Path) -> Vec<(usize, f64)> {
    r.levels
        .iter()
        .filter_map(|&level| {
            let (a, b) = (r.get(path, level)?, r.get(limit, level)?);
            Some((level, a.throughput() / b.throughput()))
        })
        .collect()
}

/// "72 % at 1 · 65 % at 8 ..." and whether every level reaches `threshold`.
fn ratio_row(ratios: &[(usize, f64)], threshold: f64) -> (String, String) {
    let text: Vec<String> = ratios
        .iter()
        .map(|(level, ratio)| format!("{:.1} % at {level}", ratio * 100.0))
        .collect();
    let missed: Vec<String> = ratios
        .iter()
        .filter(|(_, ratio)| *ratio < threshold)
        .map(|(level, _)| level.to_string())
        .collect();
    let verdict = if missed.is_empty() {
        "met".to_string()
    } else {
        format!("**missed** at {}", missed.join(", "))
    };
    (text.join(" · "), verdict)
}

/// Per-request counters of a path: at each level the servers' deltas over the requests
/// answered, and of those the lowest. Other clients of the shared servers, and requests
/// still in flight when the load generator stops counting, only ever add to a delta, so
/// the lowest level's figure is the closest to what one request costs. Only levels where
/// every answer had the same outcome count. Not for the purchase, whose cost per request
/// changes with the level by design (`at_level`).
fn per_request(r: &Results, path: Path) -> Option<PerRequest<'_>> {
    let runs: Vec<&Measurement> = r.of(path).filter(|m| m.outcomes.len() == 1).collect();
    (!runs.is_empty()).then_some(PerRequest { runs })
}

/// Per-request counters of a path at one level.
fn at_level(r: &Results, path: Path, level: usize) -> Option<PerRequest<'_>> {
    let m = r.get(path, level)?;
    Some(PerRequest { runs: vec![m] })
}

struct PerRequest<'a> {
    runs: Vec<&'a Measurement>,
}

impl PerRequest<'_> {
    fn lowest(&self, count: impl Fn(&ServerDelta) -> u64) -> f64 {
        self.runs
            .iter()
            .map(|m| count(&m.server) as f64 / m.requests.max(1) as f64)
            .fold(f64::MAX, f64::min)
    }

    fn redis(&self, command: &str) -> f64 {
        self.lowest(|s| s.redis(command))
    }

    fn redis_round_trips(&self) -> f64 {
        self.lowest(ServerDelta::redis_round_trips)
    }

    fn redis_connections(&self) -> f64 {
        self.lowest(|s| s.redis_connections)
    }

    fn redis_error_replies(&self) -> f64 {
        self.lowest(|s| s.redis_error_replies)
    }

    fn mysql(&self, counter: &str) -> f64 {
        self.lowest(|s| s.mysql(counter))
    }

    /// Every Redis command the path sent, those run inside the Lua scripts marked *.
    fn commands(&self) -> String {
        let inside = script_commands();
        let names: std::collections::BTreeSet<&String> = self
            .runs
            .iter()
            .flat_map(|m| m.server.redis_calls.keys())
            .collect();
        names
            .into_iter()
            .map(|name| (name, self.redis(name)))
            .filter(|(_, n)| *n >= 0.005)
            .map(|(name, n)| {
                let star = if inside.contains(name) { "*" } else { "" };
                format!("{name}{star} {n:.2}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn targets(md: &mut String, r: &Results) {
    md.push_str("## Targets\n\n| target | measured | verdict |\n| --- | --- | --- |\n");
    if let Some(sold) = per_request(r, Path::SoldOut) {
        let ok = near(sold.redis_round_trips(), 1.0)
            && near(sold.redis("evalsha"), 1.0)
            && near(sold.mysql(USER_STATEMENTS), 0.0)
            && near(sold.mysql(USER_CONNECTIONS), 0.0);
        let _ = writeln!(
            md,
            "| (a) sold out: 1 EVALSHA, 0 MySQL per request | \
             {:.2} Redis round trips (EVALSHA {:.2}) on {:.2} new Redis connections; {:.2} \
             MySQL statements, {:.2} MySQL connections | {} |",
            sold.redis_round_trips(),
            sold.redis("evalsha"),
            sold.redis_connections(),
            sold.mysql(USER_STATEMENTS),
            sold.mysql(USER_CONNECTIONS),
            verdict(ok)
        );
    }
    ratio_target(
        md,
        r,
        Path::SoldOut,
        Path::RedisFloor,
        SOLD_OUT_OF_REDIS_FLOOR,
    );
    if let Some(lone) = at_level(r, Path::Purchase, 1) {
        // Spin's MySQL API prepares every statement, so the one CALL is a prepare and an
        // execute. Those counters are server-wide, and other clients of the shared server
        // only ever add to them (the Spin floor, which touches no MySQL, shows how much):
        // above one each, with the component's own connections at one, they say nothing.
        // Com_call_procedure also counts the CALL the procedure makes inside.
        let redis_ok = near(lone.redis("evalsha"), 2.0) && near(lone.redis_round_trips(), 2.0);
        let one_connection = near(lone.mysql(USER_CONNECTIONS), 1.0);
        let (prepare, execute) = (
            lone.mysql("Com_stmt_prepare"),
            lone.mysql("Com_stmt_execute"),
        );
        let verdict_text = if redis_ok && one_connection && near(prepare, 1.0) && near(execute, 1.0)
        {
            verdict(true).to_string()
        } else if redis_ok && one_connection && prepare > 1.0 && execute > 1.0 {
            let background = at_level(r, Path::SpinFloor, 1)
                .map_or(0.0, |floor| floor.mysql("Com_stmt_execute"));
            format!(
                "unclear: other clients of the server ran statements meanwhile ({background:.2} \
                 executes per request of the Spin floor at 1)"
            )
        } else {
            verdict(false).to_string()
        };
        let _ = writeln!(
            md,
            "| (c) lone buyer (1 connection): 1 EVALSHA (admission, taking the lease) + 1 \
             MySQL CALL on 1 connection + 1 EVALSHA (publish) | {:.2} Redis round trips \
             (EVALSHA {:.2}, BLPOP {:.2}); {:.2} new MySQL connections of the component, \
             {prepare:.2} prepare + {execute:.2} execute ({:.2} CALLs counted inside \
             MariaDB) | {verdict_text} |",
            lone.redis_round_trips(),
            lone.redis("evalsha"),
            lone.redis("blpop"),
            lone.mysql(USER_CONNECTIONS),
            lone.mysql("Com_call_procedure"),
        );
        if let Some(m) = r.get(Path::Purchase, 1) {
            let (p50, p99) = LONE_BUYER_US;
            let _ = writeln!(
                md,
                "| (c) lone buyer's purchase latency: p50 ≤ {:.1} ms, p99 ≤ {:.1} ms | p50 {:.2} \
                 ms, p99 {:.2} ms (wrk, 1 connection, {} purchases) | {} |",
                p50 as f64 / 1000.0,
                p99 as f64 / 1000.0,
                m.latency.p50_us as f64 / 1000.0,
                m.latency.p99_us as f64 / 1000.0,
                m.requests,
                verdict(m.latency.p50_us <= p50 && m.latency.p99_us <= p99),
            );
        }
    }
    ratio_target(
        md,
        r,
        Path::Purchase,
        Path::RedisFloor,
        PURCHASE_OF_REDIS_FLOOR,
    );
    if let Some(poll) = per_request(r, Path::Polling) {
        let ok = near(poll.mysql(USER_STATEMENTS), 0.0) && near(poll.mysql(USER_CONNECTIONS), 0.0);
        let _ = writeln!(
            md,
            "| (e) polling: 0 MySQL statements per request | {:.2} MySQL statements, {:.2} \
             MySQL connections; Redis: {} | {} |",
            poll.mysql(USER_STATEMENTS),
            poll.mysql(USER_CONNECTIONS),
            poll.commands(),
            verdict(ok)
        );
    }
    ratio_target(md, r, Path::Polling, Path::SoldOut, POLLING_OF_SOLD_OUT);
    for sale in &r.sales {
        if let Some(bar) = sale_bar(&sale.shape) {
            sale_targets(md, sale, &bar);
            continue;
        }
        let held = sale.checks.iter().filter(|c| c.ok).count();
        let _ = writeln!(
            md,
            "| (f) sale clock, {}: the sale's promises hold | {held} of {} checks hold | {} |",
            sale.shape,
            sale.checks.len(),
            verdict(held == sale.checks.len())
        );
    }
    md.push('\n');
}

fn sale_targets(md: &mut String, sale: &SaleResult, bar: &SaleBar) {
    let name = &sale.shape;
    let mut row = |target: String, measured: String, ok: bool| {
        let _ = writeln!(
            md,
            "| (f) sale clock, {name}: {target} | {measured} | {} |",
            verdict(ok)
        );
    };
    row(
        "every unit sold".into(),
        format!(
            "{} of {} units sold (201), the last {:.2} s after the opening",
            sale.sold(),
            sale.stock,
            sale.last_unit_s
        ),
        sale.sold() == sale.stock.min(sale.buyers),
    );
    row(
        "0 answers 5xx".into(),
        format!("{}", sale.failures()),
        sale.failures() == 0,
    );
    row(
        "every buyer answered (201 or 409)".into(),
        format!(
            "{} of {} buyers, the last {:.2} s after the opening",
            sale.answered(),
            sale.buyers,
            sale.last_answer_s
        ),
        sale.answered() == sale.buyers,
    );
    let throttled = sale.outcomes.get("throttled").copied().unwrap_or(0);
    row(
        "0 answers `throttled`".into(),
        format!("{throttled}"),
        throttled == 0,
    );
    row(
        format!(
            "(time to the last answer) × (Spin Redis floor) ÷ buyers ≤ {:.1}",
            bar.ratio
        ),
        format!(
            "{:.2} s × {} req/s ÷ {} = {:.2}",
            sale.last_answer_s,
            rate(sale.redis_floor),
            sale.buyers,
            sale.ratio()
        ),
        sale.ratio() <= bar.ratio,
    );
    row(
        format!("presses per buyer ≤ {:.1}", bar.presses),
        format!("{:.2} ({} presses)", sale.presses_per_buyer(), sale.presses),
        sale.presses_per_buyer() <= bar.presses,
    );
    row(
        format!("peak MySQL connections ≤ {SALE_MYSQL_CONNECTIONS}"),
        format!(
            "{} of the component at once; peak `Threads_connected` {} ({} before the \
             opening, other clients of the shared server and the sampler included) of \
             `max_connections` {}",
            sale.peak_component_connections,
            sale.peak_threads_connected,
            sale.threads_connected_before,
            sale.max_connections
        ),
        sale.peak_component_connections <= SALE_MYSQL_CONNECTIONS,
    );
    let held = sale.checks.iter().filter(|c| c.ok).count();
    row(
        "the sale's promises hold".into(),
        format!(
            "{held} of {} checks hold ([sale clock](#f-the-sale-clock))",
            sale.checks.len()
        ),
        held == sale.checks.len(),
    );
}

/// The per-request path the group commit replaced, as measured on this kind of machine:
/// the whole sale from the issue that asked for the group commit (two runs), the paths
/// from `scripts/bench.sh` at commit 9b4e17d (its BENCHMARKS.md).
fn before_and_after(md: &mut String, r: &Results) {
    md.push_str(
        "## Before and after\n\n\
         *Before* is the per-request path this replaced (admission throttled, one MySQL \
         connection per purchase), measured on this kind of machine: the sale clock from the \
         two runs reported when the group commit was asked for, the paths from \
         `scripts/bench.sh` at commit 9b4e17d. *Now* is this run.\n\n\
         | measure | before | now |\n| --- | --- | --- |\n",
    );
    if let Some(sale) = r.sales.first() {
        let shape = format!(
            "sale clock, {} units, {} buyers, {} connections, {} s spread",
            sale.stock, sale.buyers, sale.connections, sale.spread_s
        );
        let _ = writeln!(
            md,
            "| {shape}: last unit sold | 47 s, 54 s | {:.2} s |\n\
             | last buyer answered | 53 s, 61 s | {:.2} s |\n\
             | (time to the last answer) × (Spin Redis floor) ÷ buyers | 12.6 | {:.2} |\n\
             | presses per buyer | 4.2, 4.4 | {:.2} |\n\
             | peak MySQL connections | 39 | {} |",
            sale.last_unit_s,
            sale.last_answer_s,
            sale.ratio(),
            sale.presses_per_buyer(),
            sale.peak_component_connections,
        );
    }
    let at = |path: Path| {
        ratios(r, path, Path::RedisFloor)
            .iter()
            .map(|(level, ratio)| format!("{:.0} % at {level}", ratio * 100.0))
            .collect::<Vec<_>>()
            .join(" · ")
    };
    let _ = writeln!(
        md,
        "| (a) sold out ÷ Spin Redis floor | 60 % at 1 · 74 % at 8 · 65 % at 32 · 72 % at 128 | {} |",
        at(Path::SoldOut)
    );
    let _ = writeln!(
        md,
        "| (c) purchase ÷ Spin Redis floor | 19 % at 1 · 25 % at 8 · 27 % at 32 · 8 % at 128 | {} |",
        at(Path::Purchase)
    );
    if let Some(m) = r.get(Path::Purchase, 1) {
        let _ = writeln!(
            md,
            "| (c) lone buyer's latency, p50 / p99 | 1.52 / 3.64 ms (1.49 / 3.27 ms with \
             `prefer_socket=false`) | {:.2} / {:.2} ms |",
            m.latency.p50_us as f64 / 1000.0,
            m.latency.p99_us as f64 / 1000.0,
        );
    }
    md.push('\n');
}

/// "| <path> throughput ≥ N % of <limit> | N % at 1 · ... | verdict |"
fn ratio_target(md: &mut String, r: &Results, path: Path, limit: Path, threshold: f64) {
    if r.of(path).next().is_none() || r.of(limit).next().is_none() {
        return;
    }
    let (text, verdict_text) = ratio_row(&ratios(r, path, limit), threshold);
    let _ = writeln!(
        md,
        "| {} throughput ≥ {:.0} % of {} | {text} | {verdict_text} |",
        path.label(),
        threshold * 100.0,
        limit.label()
    );
}

/// Per-request counters are averages: other clients of the shared servers, or a request
/// still in flight, move them by a few hundredths.
fn near(measured: f64, expected: f64) -> bool {
    (measured - expected).abs() < 0.05
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

fn round_trips(md: &mut String, r: &Results) {
    md.push_str(
        "## Round trips per request, read from the servers\n\n\
         Deltas of Redis `INFO commandstats` / `total_connections_received` and MariaDB \
         `SHOW GLOBAL STATUS` and `information_schema.USER_STATISTICS` around each \
         measurement, divided by the requests answered. For every path but the purchase, \
         of the levels where every answer had the same outcome, the lowest figure (other \
         clients of the shared servers and requests still in flight when the load stops \
         only ever add to a delta). The purchase is shown at every level: its cost per \
         request falls as buyers share group commits, so no one level stands for it. \
         *Redis RT* counts EVALSHA, EVAL, BLPOP and PING, the commands that are a round \
         trip of their own; *BLPOP* is a queued purchase waiting for its outcome; \
         *batches* counts the group commits published (`LTRIM`, which only \
         `lua/publish.lua` runs). Each new Redis connection adds the redis crate's \
         handshake, two `CLIENT SETINFO` pipelined into one round trip, which Redis 7.0 \
         refuses (the command came in 7.2): they show as *refused*. MySQL: *MySQL conns* \
         and *statements* are the per-user statistics of `seckill_bench`, the user only the \
         benchmark's Spin applications connect as (*statements* counts every command but \
         the prepared-statement protocol's own: each connection's settings query, the \
         statements a procedure runs); *prepare*, *execute* and *CALL* are the server-wide \
         `Com_stmt_prepare`, `Com_stmt_execute` and `Com_call_procedure` (the last counts \
         the CALLs inside procedures too), where other clients of the shared server add to \
         the figures, as the paths that touch no MySQL show.\n\n\
         | path | Redis RT | EVALSHA | BLPOP | batches | Redis conns | refused | MySQL conns | prepare | execute | CALL | statements |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let mut rows: Vec<(String, PerRequest)> = Vec::new();
    for path in Path::ALL {
        if path == Path::Purchase {
            for &level in &r.levels {
                if let Some(per) = at_level(r, path, level) {
                    rows.push((format!("{} at {level}", path.label()), per));
                }
            }
        } else if let Some(per) = per_request(r, path) {
            rows.push((path.label().to_string(), per));
        }
    }
    for (label, per) in &rows {
        let _ = writeln!(
            md,
            "| {label} | {:.2} | {:.2} | {:.2} | {:.3} | {:.2} | {:.2} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} |",
            per.redis_round_trips(),
            per.redis("evalsha"),
            per.redis("blpop"),
            per.redis(PUBLISH_MARK),
            per.redis_connections(),
            per.redis_error_replies(),
            per.mysql(USER_CONNECTIONS),
            per.mysql("Com_stmt_prepare"),
            per.mysql("Com_stmt_execute"),
            per.mysql("Com_call_procedure"),
            per.mysql(USER_STATEMENTS),
        );
    }
    md.push_str(
        "\nEvery Redis command per request (those marked * run inside the Lua scripts and \
         cost no round trip):\n\n",
    );
    for path in [Path::SoldOut, Path::Duplicate, Path::Polling] {
        if let Some(per) = per_request(r, path) {
            let _ = writeln!(md, "- {}: {}", path.label(), per.commands());
        }
    }
    for &level in &r.levels {
        if let Some(per) = at_level(r, Path::Purchase, level) {
            let _ = writeln!(
                md,
                "- {} at {level}: {}",
                Path::Purchase.label(),
                per.commands()
            );
        }
    }
    md.push('\n');
}

fn fractions(md: &mut String, r: &Results) {
    md.push_str(
        "## Each path against its Spin floor\n\n\
         Each product path does at least the work of its floor, under the same Spin: a \
         rejection, a poll and a purchase open Redis and send at least one command (the \
         Redis floor). A purchase also writes MySQL, but one MySQL connection and CALL \
         serve a whole batch of buyers; its fraction of the MySQL floor (a connection and \
         `SELECT 1` per request) is shown for information. *Fraction* is the path's \
         throughput (for the purchase, its 201s) over the floor's at the same level.\n\n\
         | path | level | req/s | floor | floor req/s | fraction |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for path in Path::ALL {
        for floor in [path.floor(), path.other_floor()].into_iter().flatten() {
            for m in r.of(path) {
                let Some(f) = r.get(floor, m.concurrency) else {
                    continue;
                };
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {:.0} % |",
                    path.label(),
                    m.concurrency,
                    rate(m.throughput()),
                    floor.label(),
                    rate(f.throughput()),
                    m.throughput() / f.throughput() * 100.0,
                );
            }
        }
    }
    md.push('\n');
}

/// Machine time per request: 1 / throughput, in µs. With several requests in flight both
/// cores are busy, so this is what one request costs the whole machine, and the costs of
/// the parts a path is made of add up.
fn cost(r: &Results, path: Path, level: usize) -> Option<f64> {
    r.get(path, level).map(|m| 1e6 / m.throughput())
}

/// Microseconds Redis itself spent per request on the path at `level` (every command,
/// a script's inner ones inside the script's own time).
fn redis_usec(r: &Results, path: Path, level: usize) -> Option<f64> {
    let m = r.get(path, level)?;
    let usec: u64 = m.server.redis_usec.values().sum();
    Some(usec as f64 / m.requests.max(1) as f64)
}

/// A rejection split by the variants, each a measured difference of two paths: the
/// component's instance, two variables, the JWT's signature, a Redis connection with one
/// command, and the rest; a purchase into the MySQL floor, a rejection's own work and
/// the rest.
fn costs(md: &mut String, r: &Results) {
    md.push_str(&format!(
        "## Where the time goes\n\n\
         Machine time per request, 1 / throughput, in µs, at the levels with at least \
         {SATURATED} requests in flight: both cores are busy there, so it is what one request \
         costs everything on the machine together, and the costs of a path's parts add up. \
         (At fewer, the cores wait on the round trips and sit idle.) Each \
         part is the difference between two measured paths of the same level:\n\n\
         - *instance*: the component's own 404 (no variable, no backend) less the floor \
           component's answer: what seckill's larger instance and its routing cost;\n\
         - *1 variable*: half of what the floor component's reading two variables adds to \
           its answer, with the answer the same;\n\
         - *to 401*: the malformed-token 401 (reads `jwt_secret` and `admin_token`, \
           then gives up) less the 404;\n\
         - *JWT*: the forged-token 401 (the HS256 signature is checked) less the \
           malformed one;\n\
         - *Redis conn + command*: the Redis floor less the Spin floor;\n\
         - *rest*: the sold-out rejection less the forged-token 401 and the Redis part: \
           the valid token's claims, `redis_url` read after the token, the admission \
           script instead of PING, the answer. *In Redis* is the \
           time Redis itself reports (`INFO commandstats`, usec) per request, its share \
           of the rest.\n\n\
         | level | sold out | Spin floor | instance | 1 variable | to 401 | JWT | Redis conn + command | rest | in Redis | sold out vs. Redis floor |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    ));
    for &level in r.levels.iter().filter(|&&level| level >= SATURATED) {
        let at = |path| cost(r, path, level);
        let parts = [
            Path::SoldOut,
            Path::SpinFloor,
            Path::FloorVariables,
            Path::Unrouted,
            Path::Malformed,
            Path::Forged,
            Path::RedisFloor,
        ]
        .map(at);
        let [Some(sold), Some(spin), Some(variables), Some(unrouted), Some(malformed), Some(forged), Some(redis)] =
            parts
        else {
            continue;
        };
        let connection = redis - spin;
        let _ = writeln!(
            md,
            "| {level} | {sold:.0} µs | {spin:.0} µs | {:+.0} µs | {:+.0} µs | {:+.0} µs | \
             {:+.0} µs | {connection:+.0} µs | {:+.0} µs | {:.0} µs | {:.0} % |",
            unrouted - spin,
            (variables - spin) / 2.0,
            malformed - unrouted,
            forged - malformed,
            sold - forged - connection,
            redis_usec(r, Path::SoldOut, level).unwrap_or(0.0),
            redis / sold * 100.0,
        );
    }
    md.push_str(
        "\nA purchase is a rejection's work (the admission decides) plus its own: waiting \
         for its outcome (BLPOP), or as the drainer committing the batch in MySQL and \
         publishing it, and its share of the MySQL connection and CALL its batch used. \
         *Own* is the purchase less the sold-out rejection at the same level; *per batch* \
         is purchases per group commit (201s over batches published), *MySQL conns* the \
         component's MySQL connections per purchase. At 1 and 8 the cores are not kept \
         busy, so the µs there are not machine time.\n\n\
         | level | purchase | sold out | own | per batch | MySQL conns | in Redis | purchase vs. Redis floor | purchase vs. MySQL floor |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for &level in &r.levels {
        let at = |path| cost(r, path, level);
        let (Some(purchase), Some(sold), Some(redis), Some(mysql), Some(m)) = (
            at(Path::Purchase),
            at(Path::SoldOut),
            at(Path::RedisFloor),
            at(Path::MysqlFloor),
            r.get(Path::Purchase, level),
        ) else {
            continue;
        };
        let bought = m.outcomes.get("201").copied().unwrap_or(0).max(1) as f64;
        let batches = m.server.redis(PUBLISH_MARK).max(1) as f64;
        let _ = writeln!(
            md,
            "| {level} | {purchase:.0} µs | {sold:.0} µs | {:+.0} µs | {:.1} | {:.3} | {:.0} µs | \
             {:.0} % | {:.0} % |",
            purchase - sold,
            bought / batches,
            m.server.mysql(USER_CONNECTIONS) as f64 / bought,
            redis_usec(r, Path::Purchase, level).unwrap_or(0.0),
            redis / purchase * 100.0,
            mysql / purchase * 100.0,
        );
    }
    md.push('\n');
}

/// A path of this build against the baseline's (`--baseline-wasm`): the per-round
/// ratios, their median and spread, and each against Spin's Redis floor.
fn against_baseline(md: &mut String, c: &Comparison) {
    let (baseline, log_dir, secs) = (&c.baseline, &c.log_dir, c.seconds_per_turn);
    let (lines, bytes) = (c.log_lines_per_request, c.log_bytes_per_request);
    let baseline_lines = c.baseline_log_lines_per_request;
    let (path, limit) = (c.path.label(), BASELINE_COST * 100.0);
    let _ = write!(
        md,
        "## This build against a baseline\n\n\
         The path {path} of this build against a baseline build (`{baseline}`, given by \
         `--baseline-wasm`), both served all along by the same Spin in two `spin up` \
         processes, each buying on vouchers of its own: a sold-out voucher of one unit, or \
         for the purchase a new voucher each turn, bought by distinct buyers and counted \
         by its `201`s. At each level, rounds of one {secs} s wrk \
         turn each: this build and the baseline in alternating order (this build first in \
         odd rounds), then Spin's Redis floor. The machine's other work meets both alike, \
         and each round's *ratio* (this build's throughput ÷ the baseline's) compares turns \
         seconds apart. *Cost* is 1 − the median ratio: the share of the baseline's \
         throughput lost. The request log goes where a deployment's goes: Spin writes the \
         component's stdout into `seckill_stdout.txt` in its `--log-dir`, here a directory \
         under `{log_dir}` on the machine's disk, and echoes it on its own stderr (here a \
         file in that directory). This build wrote {lines:.2} lines, {bytes:.0} bytes, per \
         answer; the baseline {baseline_lines:.2} lines.\n\n\
         | level | rounds | this build | baseline | ratio, median (min – max) | cost | \
         cost ≤ {limit:.0} % | this build ÷ Redis floor | baseline ÷ Redis floor |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for level in c.levels() {
        let of = |pick: fn(&Round) -> f64| median(c.at(level).map(pick).collect());
        let ratios: Vec<f64> = c.at(level).map(Round::ratio).collect();
        let low = ratios.iter().copied().fold(f64::MAX, f64::min);
        let high = ratios.iter().copied().fold(f64::MIN, f64::max);
        let ratio = of(Round::ratio);
        let _ = writeln!(
            md,
            "| {level} | {} | {} req/s | {} req/s | {ratio:.3} ({low:.3} – {high:.3}) | \
             {:.1} % | {} | {:.0} % | {:.0} % |",
            ratios.len(),
            rate(of(|r| r.current.throughput())),
            rate(of(|r| r.baseline.throughput())),
            (1.0 - ratio) * 100.0,
            verdict(1.0 - ratio <= BASELINE_COST),
            of(|r| r.current.throughput() / r.floor.throughput()) * 100.0,
            of(|r| r.baseline.throughput() / r.floor.throughput()) * 100.0,
        );
    }
    let commands = |pick: fn(&Round) -> &Measurement| {
        let runs = c.rounds.iter().map(pick).collect();
        PerRequest { runs }.commands()
    };
    let _ = write!(
        md,
        "\nRedis commands per answer (the lowest of the turns; * inside the \
         script): this build {}; the baseline {}.\n\n\
         Every round, in req/s (*floor*: Spin's Redis floor):\n\n\
         | level | round | this build | baseline | ratio | floor |\n\
         | --- | --- | --- | --- | --- | --- |\n",
        commands(|r| &r.current),
        commands(|r| &r.baseline),
    );
    for level in c.levels() {
        for (i, r) in c.at(level).enumerate() {
            let _ = writeln!(
                md,
                "| {level} | {} | {} | {} | {:.3} | {} |",
                i + 1,
                rate(r.current.throughput()),
                rate(r.baseline.throughput()),
                r.ratio(),
                rate(r.floor.throughput()),
            );
        }
    }
    md.push('\n');
}

/// The WASIp3 build (this run's) against the default build (`--baseline-wasm`): the
/// sold-out path at every level, each build against the floors of its kind, and the
/// sale clock's shapes on both.
fn two_builds(md: &mut String, r: &Results, c: &Comparison) {
    let _ = write!(
        md,
        "## The two builds\n\n\
         The WASIp3 build (this run's seckill, `spin-p3.toml`) and the default build \
         (`{baseline}`) served at once by the same Spin in two `spin up` processes, with \
         the same variables and flags, on the same sold-out voucher. At each level, rounds \
         of one {secs} s wrk turn each: the two builds in alternating order, then Spin's \
         p3 and p2 Redis floors (the floor component's two builds: a PING on the \
         connection the instance keeps, and a PING on a connection opened for the \
         request). *Redis conns* are Redis's `total_connections_received` per answer (the \
         lowest turn's).\n\n\
         | level | rounds | WASIp3 | default | WASIp3 ÷ default | WASIp3 ÷ p2 Redis floor | \
         ≥ {bar} × from {SATURATED} | WASIp3 ÷ p3 Redis floor | default ÷ p2 Redis floor | \
         Redis conns, WASIp3 / default | ≤ {conns} | p99, WASIp3 / default |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        baseline = c.baseline,
        secs = c.seconds_per_turn,
        bar = P3_OF_P2_REDIS_FLOOR,
        conns = P3_REDIS_CONNECTIONS,
    );
    for level in c.levels() {
        let of = |pick: &dyn Fn(&Round) -> f64| median(c.at(level).map(pick).collect());
        let p3_floor = |r: &Round| {
            r.p3_floor
                .as_ref()
                .map_or(f64::NAN, Measurement::throughput)
        };
        let of_p2_floor = of(&|r| r.current.throughput() / r.floor.throughput());
        let conns = |pick: fn(&Round) -> &Measurement| {
            PerRequest {
                runs: c.at(level).map(pick).collect(),
            }
            .redis_connections()
        };
        let p3_conns = conns(|r| &r.current);
        let p99 = |pick: fn(&Round) -> &Measurement| {
            median(
                c.at(level)
                    .map(|r| pick(r).latency.p99_us as f64 / 1000.0)
                    .collect(),
            )
        };
        let _ = writeln!(
            md,
            "| {level} | {} | {} req/s | {} req/s | {:.2} | {of_p2_floor:.2} | {} | {:.2} | \
             {:.2} | {p3_conns:.3} / {:.3} | {} | {:.2} / {:.2} ms |",
            c.at(level).count(),
            rate(of(&|r| r.current.throughput())),
            rate(of(&|r| r.baseline.throughput())),
            of(&Round::ratio),
            if level >= SATURATED {
                verdict(of_p2_floor >= P3_OF_P2_REDIS_FLOOR)
            } else {
                "–"
            },
            of(&|r| r.current.throughput() / p3_floor(r)),
            of(&|r| r.baseline.throughput() / r.floor.throughput()),
            conns(|r| &r.baseline),
            verdict(p3_conns <= P3_REDIS_CONNECTIONS),
            p99(|r| &r.current),
            p99(|r| &r.baseline),
        );
    }
    if r.baseline_sales.is_empty() {
        md.push('\n');
        return;
    }
    md.push_str(
        "\nThe sale clock's shapes on both builds, one after the other (in alternating \
         order from shape to shape), each just after Spin's p2 Redis floor at its \
         connections; the shapes and columns of *(f) The sale clock* below, which shows the \
         WASIp3 build's sales whole.\n\n\
         | shape | last answer, WASIp3 / default | WASIp3 faster | last unit, WASIp3 / default | presses per buyer | 5xx | peak MySQL conns, component | Redis conns per press |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for (p3, default) in r.sales.iter().zip(&r.baseline_sales) {
        let both = |pick: fn(&SaleResult) -> String| format!("{} / {}", pick(p3), pick(default));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            p3.shape,
            both(|s| format!("{:.2} s", s.last_answer_s)),
            match sale_bar(&p3.shape) {
                Some(_) => verdict(p3.last_answer_s < default.last_answer_s),
                None => "– (held by its arrivals)",
            },
            both(|s| format!("{:.2} s", s.last_unit_s)),
            both(|s| format!("{:.2}", s.presses_per_buyer())),
            both(|s| {
                let errors: u64 = s
                    .outcomes
                    .iter()
                    .filter(|(outcome, _)| outcome.starts_with('5'))
                    .map(|(_, n)| n)
                    .sum();
                errors.to_string()
            }),
            both(|s| s.peak_component_connections.to_string()),
            both(|s| format!(
                "{:.3}",
                s.server.redis_connections as f64 / s.presses.max(1) as f64
            )),
        );
    }
    md.push('\n');
}

fn levels(md: &mut String, r: &Results) {
    md.push_str(
        "## Every path at every level\n\n\
         Latencies are wrk's, per request, from sending to the whole answer; each \
         percentile is the median of the rounds', *max* the largest. Outcomes are \
         status codes, or a 409's or 429's error code.\n\n\
         | path | level | requests | req/s | p50 | p99 | p99.9 | max | outcomes |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for path in Path::ALL {
        for m in r.of(path) {
            let mut outcomes = outcome_list(&m.outcomes);
            if m.socket_errors > 0 {
                outcomes.push_str(&format!(", socket errors {}", m.socket_errors));
            }
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} |",
                path.label(),
                m.concurrency,
                m.requests,
                rate(m.throughput()),
                latency(&m.latency),
                outcomes
            );
        }
    }
    md.push('\n');
}

fn sale_clock(md: &mut String, r: &Results) {
    if r.sales.is_empty() {
        return;
    }
    md.push_str(
        "## (f) The sale clock\n\n\
         A whole sale as its buyers live it. The voucher is created to open at a whole \
         second 2 to 3 s ahead; every buyer's first press falls at a uniformly random \
         moment within the shape's *spread* after the opening, through at most *C* \
         requests in flight (*C* keep-alive connections, opened before the opening by as \
         many polls of the voucher, as sale pages would have). Each buyer then does what \
         the sale page does: on `429` she waits `Retry-After` seconds and presses again; a \
         `201` or a `409` is her final answer; after a `5xx` she presses again a second \
         later, three times at most. Times are from the opening: *last unit* is when the \
         driver received the last `201`, *last answer* when the last buyer had her final \
         answer. MySQL's open connections are sampled about every 20 ms meanwhile through a \
         connection of the benchmark's own: the component's (its MySQL user's, in \
         `PROCESSLIST`) and the whole server's `Threads_connected`, and how long the \
         component's longest-running statement had been running (*longest statement*: a \
         group commit held up in MySQL shows there) and the longest any connection (anyone's: \
         MariaDB names none before it authenticates) was seen in its handshake. Just before \
         each sale, \
         Spin's Redis floor is measured with wrk at the sale's connections; *ratio* is \
         (time to the last answer) × (that floor) ÷ buyers: 1.0 would be every buyer \
         answered once at the rate Spin answers a PING through Redis.\n\n\
         ![Answers per 100 ms by outcome, buyers answered and units sold, and MySQL \
         connections against time, for the default shape](docs/sale-clock.png)\n\n\
         | shape | units | buyers | C | spread | last unit | last answer | presses per buyer | Spin Redis floor | ratio | peak MySQL conns, component | peak `Threads_connected` (before) | MySQL conns opened | batches | longest statement / handshake |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for sale in &r.sales {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.1} s | {:.2} s | {:.2} s | {:.2} | {} req/s | {:.2} | {} | \
             {} ({}) | {} | {} | {} / {} ms |",
            sale.shape,
            sale.stock,
            sale.buyers,
            sale.connections,
            sale.spread_s,
            sale.last_unit_s,
            sale.last_answer_s,
            sale.presses_per_buyer(),
            rate(sale.redis_floor),
            sale.ratio(),
            sale.peak_component_connections,
            sale.peak_threads_connected,
            sale.threads_connected_before,
            sale.server.mysql(USER_CONNECTIONS),
            sale.server.redis(PUBLISH_MARK),
            sale.longest_statement_ms,
            sale.longest_handshake_ms,
        );
    }
    md.push_str(
        "\nAnswers: *final* per buyer, *every press* retries included (status, or a \
         409's or 429's error code); latency per press, from sending to the whole answer \
         (waiting for a free connection included).\n\n\
         | shape | final | every press | latency p50 / p99 / max |\n\
         | --- | --- | --- | --- |\n",
    );
    for sale in &r.sales {
        let l = &sale.latency;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.0} / {:.0} / {:.0} ms |",
            sale.shape,
            outcome_list(&sale.finals),
            outcome_list(&sale.outcomes),
            l.p50_us as f64 / 1000.0,
            l.p99_us as f64 / 1000.0,
            l.max_us as f64 / 1000.0,
        );
    }
    resales(md, r);
    for sale in &r.sales {
        let expired = match sale.resale {
            Some(_) => " and the last expire was done",
            None => "",
        };
        let _ = write!(
            md,
            "\nInvariants, {} (from MySQL and Redis once every buyer had her answer{expired}):\n\n\
             | invariant | expected | found | |\n| --- | --- | --- | --- |\n",
            sale.shape
        );
        for check in &sale.checks {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                check.what,
                check.expected,
                check.found,
                if check.ok { "✓" } else { "✗" }
            );
        }
    }
    md.push('\n');
}

/// The shapes run past their payment deadlines: what became of their orders.
fn resales(md: &mut String, r: &Results) {
    let sales: Vec<(&SaleResult, &Resale)> = r
        .sales
        .iter()
        .filter_map(|sale| Some((sale, sale.resale.as_ref()?)))
        .collect();
    if sales.is_empty() {
        return;
    }
    md.push_str(
        "\nUnpaid orders expiring: a shape with a payment window creates its voucher with \
         `pay_within_s`. Each winner pays at once (`POST /orders/{id}/pay`, as the payment \
         system would) unless she is among the buyers drawn never to pay (one seeded draw \
         per buyer). An unpaid order expires at its deadline with no scheduler: the first \
         press after it gives the unit back to the sale, for the buyers still arriving \
         within the spread (a buyer told `sold_out` has stopped). Once every buyer had her \
         answer and the last deadline had passed (the payment window and a second after \
         the last `201`), the driver called `POST /vouchers/{id}/expire` once, as a cron \
         job would, then checked. Orders are counted in MySQL; *resold* is orders \
         created less units, *given back* Redis's count of units returned (the \
         presses' sweeps and the last expire's). For these shapes the times above \
         (last unit, last answer, and so the ratio) are the spread's, not the \
         component's.\n\n\
         | shape | pay within | never pay | orders created | paid | expired | units resold | given back (by the last expire) | payments |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for (sale, resale) in sales {
        let _ = writeln!(
            md,
            "| {} | {} s | {:.0} % | {} | {} | {} | {} | {} ({}) | {} |",
            sale.shape,
            resale.pay_within_s,
            resale.never_pay * 100.0,
            resale.orders_created,
            resale.paid,
            resale.expired,
            resale.resold(sale.stock),
            resale.units_returned,
            resale.returned_at_end,
            outcome_list(&resale.payments),
        );
    }
}

fn outcome_list(outcomes: &BTreeMap<String, u64>) -> String {
    outcomes
        .iter()
        .map(|(outcome, n)| format!("{outcome} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// "p50 | p99 | p99.9 | max", in milliseconds.
fn latency(l: &Latency) -> String {
    [l.p50_us, l.p99_us, l.p999_us, l.max_us]
        .map(|us| format!("{:.2} ms", us as f64 / 1000.0))
        .join(" | ")
}

/// Requests per second, to three significant figures at most.
fn rate(per_second: f64) -> String {
    if per_second >= 100.0 {
        format!("{per_second:.0}")
    } else {
        format!("{per_second:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_missed_at_the_levels_below_its_threshold() {
        let (text, verdict) = ratio_row(&[(1, 0.75), (8, 0.61), (128, 0.55)], 0.60);
        assert_eq!(text, "75.0 % at 1 · 61.0 % at 8 · 55.0 % at 128");
        assert_eq!(verdict, "**missed** at 128");
        assert_eq!(ratio_row(&[(1, 0.9)], 0.6).1, "met");
    }
}
