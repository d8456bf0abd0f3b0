//! BENCHMARKS.md, rendered from one run's results: the targets with the measured figure
//! beside each, the round trips read from the servers, every path at every level, each
//! path as a fraction of the limit that binds it, and the burst's invariants. The
//! reasoning that does not change from run to run is in `tests/bench/analysis.md`.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::counters::{script_commands, ServerDelta};
use crate::results::{Latency, Measurement, Path, Results};

const ANALYSIS: &str = include_str!("../analysis.md");

/// Thresholds from the issue: sold-out throughput against the host floor and the Redis
/// floor, purchase throughput against MySQL alone over fresh connections.
const SOLD_OUT_OF_HOST_FLOOR: f64 = 0.60;
const SOLD_OUT_OF_REDIS_FLOOR: f64 = 0.90;
const PURCHASE_OF_MYSQL_FRESH: f64 = 0.50;

pub fn render(results: &Results) -> String {
    let mut md = String::new();
    header(&mut md, results);
    targets(&mut md, results);
    round_trips(&mut md, results);
    fractions(&mut md, results);
    costs(&mut md, results);
    levels(&mut md, results);
    burst(&mut md, results);
    md.push_str(ANALYSIS);
    md
}

fn header(md: &mut String, r: &Results) {
    let m = &r.machine;
    let when = chrono::DateTime::from_timestamp(r.started_at as i64, 0)
        .map(|t| t.format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_default();
    let levels: Vec<String> = r.levels.iter().map(ToString::to_string).collect();
    let _ = write!(
        md,
        "# Benchmarks\n\n\
         Written by `scripts/bench.sh` ({when}, commit {commit}); edit `tests/bench/` rather \
         than this file. \
         Every figure below comes from that one run.\n\n\
         **Machine.** {cpus} × {cpu}, Linux {kernel}; Redis {redis}, MariaDB {mariadb}, {wrk}. \
         A 2-core *shared* machine: the load generator, the test host, Redis and MariaDB \
         all run on the same two cores, beside whatever else the machine is doing (its 1-minute \
         load average was {load:.1} when this run began). Absolute \
         figures move from run to run; read them as ratios within one run, where all paths \
         and limits at one level were measured within a minute of each other.\n\n\
         **Run.** `scripts/bench.sh` took {total:.0} s: {setup:.0} s for services, migrations \
         and (incremental) builds, {run:.0} s starting the hosts and measuring. Concurrency levels {levels}, \
         {secs} s each, level by level (every path at one level before the next), after a \
         1 s warm-up of every path; loopback only.\n\n\
         ![Throughput and p99 latency against concurrency, one line per path](docs/bench.png)\n\n",
        commit = m.commit,
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

/// Per-request counters at concurrency 1, where at most one request is in flight when
/// the load stops (at higher levels up to C requests reach the servers after the load
/// generator stopped counting, so those rows may read up to C/N high).
fn per_request(r: &Results, path: Path) -> Option<(&Measurement, PerRequest<'_>)> {
    let m = r.of(path).next()?;
    Some((m, PerRequest::of(&m.server, m.requests)))
}

struct PerRequest<'a> {
    server: &'a ServerDelta,
    requests: f64,
}

impl PerRequest<'_> {
    fn of(server: &ServerDelta, requests: u64) -> PerRequest<'_> {
        PerRequest {
            server,
            requests: requests.max(1) as f64,
        }
    }

    fn redis(&self, command: &str) -> f64 {
        self.server.redis(command) as f64 / self.requests
    }

    fn redis_round_trips(&self) -> f64 {
        self.server.redis_round_trips() as f64 / self.requests
    }

    fn redis_connections(&self) -> f64 {
        self.server.redis_connections as f64 / self.requests
    }

    fn redis_error_replies(&self) -> f64 {
        self.server.redis_error_replies as f64 / self.requests
    }

    fn mysql(&self, counter: &str) -> f64 {
        self.server.mysql(counter) as f64 / self.requests
    }
}

fn targets(md: &mut String, r: &Results) {
    md.push_str("## Targets\n\n| target | measured | verdict |\n| --- | --- | --- |\n");
    if let Some((_, sold)) = per_request(r, Path::SoldOut) {
        let ok = near(sold.redis_round_trips(), 1.0)
            && near(sold.mysql("Questions"), 0.0)
            && near(sold.mysql("Connections"), 0.0);
        let _ = writeln!(
            md,
            "| sold-out rejection: 1 Redis round trip, 0 MySQL statements per request | \
             {:.2} Redis round trips (EVALSHA {:.2}) on {:.2} new Redis connections; {:.2} \
             MySQL statements (Questions), {:.2} MySQL connections | {} |",
            sold.redis_round_trips(),
            sold.redis("evalsha"),
            sold.redis_connections(),
            sold.mysql("Questions"),
            sold.mysql("Connections"),
            verdict(ok)
        );
    }
    for (path, limit, threshold) in [
        (Path::SoldOut, Path::HostFloor, SOLD_OUT_OF_HOST_FLOOR),
        (Path::SoldOut, Path::RedisFloor, SOLD_OUT_OF_REDIS_FLOOR),
    ] {
        ratio_target(md, r, path, limit, threshold);
    }
    if let Some((_, buy)) = per_request(r, Path::Purchase) {
        let ok = near(buy.redis_round_trips(), 2.0);
        let _ = writeln!(
            md,
            "| purchase: 2 Redis round trips | {:.2} (EVALSHA {:.2}, EVAL {:.2}) | {} |",
            buy.redis_round_trips(),
            buy.redis("evalsha"),
            buy.redis("eval"),
            verdict(ok)
        );
        // Spin's MySQL API prepares every statement, so one statement is two round
        // trips, a prepare and an execute, on a connection opened for the request.
        let ok = near(buy.mysql("Com_call_procedure"), 1.0)
            && near(buy.mysql("Com_stmt_prepare"), 1.0)
            && near(buy.mysql("Com_stmt_execute"), 1.0);
        let _ = writeln!(
            md,
            "| purchase: as few MySQL round trips as Spin's API allows | {:.2} CALL: {:.2} \
             prepare + {:.2} execute; {:.2} new MySQL connections (see \
             [analysis](#mysql-connections-per-request)) | {} |",
            buy.mysql("Com_call_procedure"),
            buy.mysql("Com_stmt_prepare"),
            buy.mysql("Com_stmt_execute"),
            buy.mysql("Connections"),
            verdict(ok)
        );
    }
    ratio_target(
        md,
        r,
        Path::Purchase,
        Path::MysqlFresh,
        PURCHASE_OF_MYSQL_FRESH,
    );
    let held = r.burst.checks.iter().filter(|c| c.ok).count();
    let _ = writeln!(
        md,
        "| burst finishes with the invariants intact | {held} of {} checks hold ([burst](#d-the-burst)) | {} |\n",
        r.burst.checks.len(),
        verdict(held == r.burst.checks.len())
    );
}

/// "| <path> throughput ≥ N % of <limit> | N % at 1 · ... | verdict |"
fn ratio_target(md: &mut String, r: &Results, path: Path, limit: Path, threshold: f64) {
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
         `SHOW GLOBAL STATUS` around each measurement, divided by the requests answered, at \
         concurrency 1 (where no request is left in flight when the load stops). \
         *Redis RT* counts EVALSHA, EVAL and PING, the commands that are a round trip of \
         their own. Each new Redis connection adds the redis crate's handshake, two \
         `CLIENT SETINFO` pipelined into one round trip, which Redis 7.0 refuses (the \
         command came in 7.2): they show as *refused*. MySQL: *prepare*, *execute* and *CALL* \
         are `Com_stmt_prepare`, `Com_stmt_execute` and `Com_call_procedure`; *Questions* \
         also counts each connection's settings query and COM_QUITs, less the benchmark's \
         own `SHOW STATUS`. The limits that touch neither server show what other clients \
         of the shared servers did meanwhile.\n\n\
         | path | Redis RT | Redis conns | refused | MySQL conns | prepare | execute | CALL | Questions |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for path in Path::ALL {
        let Some((_, per)) = per_request(r, path) else {
            continue;
        };
        let _ = writeln!(
            md,
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            path.label(),
            per.redis_round_trips(),
            per.redis_connections(),
            per.redis_error_replies(),
            per.mysql("Connections"),
            per.mysql("Com_stmt_prepare"),
            per.mysql("Com_stmt_execute"),
            per.mysql("Com_call_procedure"),
            per.mysql("Questions"),
        );
    }
    let inside = script_commands();
    md.push_str(
        "\nEvery Redis command per request, at concurrency 1 (those marked * run inside \
         the Lua scripts and cost no round trip):\n\n",
    );
    for path in [Path::SoldOut, Path::Duplicate, Path::Purchase] {
        let Some((m, _)) = per_request(r, path) else {
            continue;
        };
        let _ = writeln!(
            md,
            "- {}: {}",
            path.label(),
            commands(&m.server, m.requests, &inside)
        );
    }
    md.push('\n');
}

fn commands(
    server: &ServerDelta,
    requests: u64,
    inside: &std::collections::BTreeSet<String>,
) -> String {
    let per = requests.max(1) as f64;
    server
        .redis_calls
        .iter()
        .map(|(name, n)| {
            let star = if inside.contains(name) { "*" } else { "" };
            format!("{name}{star} {:.2}", *n as f64 / per)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn fractions(md: &mut String, r: &Results) {
    md.push_str(
        "## Each path against the limit that binds it\n\n\
         A path does at least the work of each of its limits, so the slowest of them at the \
         same concurrency is the one that binds; *fraction* is the path's throughput over \
         that limit's. Rejections are held against the host floor (limit 1), the host's \
         Redis floor (limit 4) and the admission script alone in its sold-out case (limit \
         2); the purchase also against the script's admitted case and MySQL alone over \
         fresh connections (limit 3).\n\n\
         | path | level | req/s | binds | limit req/s | fraction | other limits (req/s) |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for path in [Path::SoldOut, Path::Duplicate, Path::Purchase] {
        for m in r.of(path) {
            let mut limits: Vec<&Measurement> = path
                .limits()
                .iter()
                .filter_map(|&limit| r.get(limit, m.concurrency))
                .collect();
            limits.sort_by(|a, b| a.throughput().total_cmp(&b.throughput()));
            let Some((binding, others)) = limits.split_first() else {
                continue;
            };
            let others: Vec<String> = others
                .iter()
                .map(|o| format!("{}: {}", o.path.label(), rate(o.throughput())))
                .collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {:.0} % | {} |",
                path.label(),
                m.concurrency,
                rate(m.throughput()),
                binding.path.label(),
                rate(binding.throughput()),
                m.throughput() / binding.throughput() * 100.0,
                others.join("; ")
            );
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

/// A rejection split into the product's instance (the host floor), one Redis connection
/// with a command (the Redis floor less the floor component's own 404) and the rest (the
/// component's own work and the script); a purchase into MySQL alone over fresh
/// connections, a rejection's work, and the rest (the second script and settling).
fn costs(md: &mut String, r: &Results) {
    md.push_str(
        "## Where the time goes\n\n\
         Machine time per request, 1 / throughput, in µs, at the levels with more than one \
         request in flight: both cores are busy there, so it is what one request costs \
         everything on the machine together, and the costs of a path's parts add up.\n\n\
         A sold-out rejection is the product's instance and routing (the host floor), one \
         new Redis connection with one command (the Redis floor less the redis-floor \
         component's own 404) and the rest: the component's own work (variables, JWT, keys, \
         the answer) and the script. *Ceiling* is what the first two parts alone would \
         allow, as a fraction of the host floor: no request that opens a Redis connection \
         can do better against limit 1.\n\n\
         | level | sold out | host floor | Redis connection + command | rest | ceiling vs. host floor | sold out vs. ceiling |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for &level in r.levels.iter().filter(|&&level| level > 1) {
        let parts = (
            cost(r, Path::SoldOut, level),
            cost(r, Path::HostFloor, level),
            cost(r, Path::RedisFloor, level),
            cost(r, Path::FloorComponent, level),
        );
        let (Some(sold), Some(host), Some(redis), Some(floor_component)) = parts else {
            continue;
        };
        cost_row(md, level, sold, host, redis - floor_component);
    }
    md.push_str(
        "\nA purchase is MySQL alone over fresh connections, a rejection's work (host, Redis \
         connection, admission) and the rest: the second script, which settles, and the \
         component's handling of the order. On one machine they share the two cores, so \
         *ceiling* is what MySQL alone and a rejection together would allow, as a fraction \
         of MySQL alone: the purchase cannot do better against limit 3 here.\n\n\
         | level | purchase | MySQL alone, fresh | sold-out rejection | rest | ceiling vs. MySQL alone | purchase vs. ceiling |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for &level in r.levels.iter().filter(|&&level| level > 1) {
        let parts = (
            cost(r, Path::Purchase, level),
            cost(r, Path::MysqlFresh, level),
            cost(r, Path::SoldOut, level),
        );
        let (Some(purchase), Some(mysql), Some(rejection)) = parts else {
            continue;
        };
        cost_row(md, level, purchase, mysql, rejection);
    }
    md.push('\n');
}

/// A path's cost against the limit it is measured against (`base`) and the other part
/// it cannot avoid (`extra`): the rest, the ceiling the two parts leave against the limit,
/// and how close the path comes to that ceiling.
fn cost_row(md: &mut String, level: usize, total: f64, base: f64, extra: f64) {
    let _ = writeln!(
        md,
        "| {level} | {total:.0} µs | {base:.0} µs | {extra:.0} µs | {:.0} µs | {:.0} % | {:.0} % |",
        total - base - extra,
        base / (base + extra) * 100.0,
        (base + extra) / total * 100.0
    );
}

fn levels(md: &mut String, r: &Results) {
    md.push_str(
        "## Every path at every level\n\n\
         Latencies are wrk's (HTTP paths) or the native loop's, per request, from sending \
         to the whole answer. Outcomes are status codes, or a 409's error code, or the \
         script's or procedure's answer for the native loops.\n\n\
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

fn burst(md: &mut String, r: &Results) {
    let b = &r.burst;
    let per = PerRequest::of(&b.server, b.requests);
    let _ = write!(
        md,
        "## (d) The burst\n\n\
         {buyers} buyers for {stock} units, every buyer pressing twice: {requests} requests \
         released at the same instant, each on its own connection. All were answered in \
         {secs:.2} s ({rate} req/s); latency p50 / p99 / p99.9 / max: {lat}. Outcomes: \
         {outcomes}. Per request: {rt:.2} Redis round trips, {calls:.2} MySQL CALLs, \
         {conns:.2} MySQL connections.\n\n\
         | invariant | expected | found | |\n| --- | --- | --- | --- |\n",
        buyers = b.buyers,
        stock = b.stock,
        requests = b.requests,
        secs = b.seconds,
        rate = rate(b.requests as f64 / b.seconds),
        lat = latency(&b.latency).replace(" | ", " / "),
        outcomes = outcome_list(&b.outcomes),
        rt = per.redis_round_trips(),
        calls = per.mysql("Com_call_procedure"),
        conns = per.mysql("Connections"),
    );
    for check in &b.checks {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            check.what,
            check.expected,
            check.found,
            if check.ok { "✓" } else { "✗" }
        );
    }
    md.push('\n');
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
