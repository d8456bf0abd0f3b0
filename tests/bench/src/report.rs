//! BENCHMARKS.md, rendered from one run's results: the targets with the measured figure
//! beside each, the round trips read from the servers, each path as a fraction of its
//! Spin floor, where the time goes (from the variants), every path at every level, and
//! the storm with its invariants. The reasoning that does not change from run to run is
//! in `tests/bench/analysis.md`.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::counters::{script_commands, ServerDelta, USER_CONNECTIONS, USER_STATEMENTS};
use crate::results::{failures, Latency, Measurement, Path, Results};

const ANALYSIS: &str = include_str!("../analysis.md");

/// Thresholds from the issues: sold-out throughput against Spin's Redis floor, purchase
/// throughput against Spin's MySQL floor, polling throughput against the sold-out path.
const SOLD_OUT_OF_REDIS_FLOOR: f64 = 0.90;
const PURCHASE_OF_MYSQL_FLOOR: f64 = 0.60;
const POLLING_OF_SOLD_OUT: f64 = 0.90;
/// The concurrency from which the machine's two cores are kept busy despite Spin's
/// write stalls, so that 1 / throughput is machine time per request.
const SATURATED: usize = 32;

pub fn render(results: &Results) -> String {
    let mut md = String::new();
    header(&mut md, results);
    targets(&mut md, results);
    round_trips(&mut md, results);
    fractions(&mut md, results);
    costs(&mut md, results);
    levels(&mut md, results);
    storms(&mut md, results);
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
         Every figure below comes from that one run, under real Spin: `{spin}`.\n\n\
         **Machine.** {cpus} × {cpu}, Linux {kernel}; Redis {redis}, MariaDB {mariadb}, {wrk}. \
         A 2-core *shared* machine: the load generator, Spin, Redis and MariaDB \
         all run on the same two cores, beside whatever else the machine is doing (its 1-minute \
         load average was {load:.1} when this run began). Absolute \
         figures move from run to run; read them as ratios within one run, where all paths \
         and floors at one level were measured within a minute of each other.\n\n\
         **Run.** `scripts/bench.sh` took {total:.0} s: {setup:.0} s for services, migrations \
         and (incremental) builds, {run:.0} s starting Spin and measuring. Three `spin up` \
         processes: seckill, seckill with `prefer_socket=false` on its MySQL URL, and the \
         floor component (`tests/bench/floor`); one more for each storm with another \
         `max_inflight_purchases`. Concurrency levels {levels}, \
         {secs} s each, level by level (every path at one level before the next), in \
         {rounds} rounds of {round} s (every path once per round), after a \
         1 s warm-up of every path; then the storm (f) in four settings; loopback only.\n\n\
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
/// every answer had the same outcome count (a purchase run with `throttled` answers among
/// its 201s mixes two paths).
fn per_request(r: &Results, path: Path) -> Option<PerRequest<'_>> {
    let runs: Vec<&Measurement> = r.of(path).filter(|m| m.outcomes.len() == 1).collect();
    (!runs.is_empty()).then_some(PerRequest { runs })
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
            && near(sold.mysql(USER_STATEMENTS), 0.0)
            && near(sold.mysql(USER_CONNECTIONS), 0.0);
        let _ = writeln!(
            md,
            "| sold-out rejection: 1 Redis round trip, 0 MySQL statements per request | \
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
    if let Some(buy) = per_request(r, Path::Purchase) {
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
        // Com_call_procedure also counts the CALLs a procedure makes inside MariaDB.
        // These counters are server-wide: what other clients prepare shows on the Spin
        // floor, which touches no MySQL, and then no verdict can be read from them.
        let background =
            per_request(r, Path::SpinFloor).map_or(0.0, |floor| floor.mysql("Com_stmt_prepare"));
        let ok =
            near(buy.mysql("Com_stmt_prepare"), 1.0) && near(buy.mysql("Com_stmt_execute"), 1.0);
        let verdict_text = if near(background, 0.0) {
            verdict(ok).to_string()
        } else {
            format!(
                "unclear: other clients prepared {background:.2} statements per request of \
                 the Spin floor meanwhile"
            )
        };
        let _ = writeln!(
            md,
            "| purchase: as few MySQL round trips as Spin's API allows | {:.2} prepare + \
             {:.2} execute ({:.2} CALLs counted inside MariaDB); {:.2} new MySQL connections \
             (see [analysis](#mysql-connections-per-request)) | {verdict_text} |",
            buy.mysql("Com_stmt_prepare"),
            buy.mysql("Com_stmt_execute"),
            buy.mysql("Com_call_procedure"),
            buy.mysql(USER_CONNECTIONS),
        );
    }
    ratio_target(
        md,
        r,
        Path::Purchase,
        Path::MysqlFloor,
        PURCHASE_OF_MYSQL_FLOOR,
    );
    ratio_target(
        md,
        r,
        Path::PurchaseTcp,
        Path::MysqlFloorTcp,
        PURCHASE_OF_MYSQL_FLOOR,
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
    // The first storm runs spin.toml's own settings; the others are comparisons.
    for storm in r.storms.iter().take(1) {
        let server_errors = failures(&storm.outcomes);
        let held = storm.checks.iter().filter(|c| c.ok).count();
        let _ = writeln!(
            md,
            "| (f) storm, {url}: 0 answers 5xx, every unit sold, invariants hold | \
             {server_errors} answers 5xx; {sold} of {stock} units sold, the last after \
             {after:.2} s; {held} of {checks} checks hold ([storm](#f-the-storm)) | {verdict} |",
            url = storm.setting,
            sold = storm.sold_at.len(),
            stock = storm.stock,
            after = storm.sold_out_after,
            checks = storm.checks.len(),
            verdict =
                verdict(held == storm.checks.len() && storm.sold_at.len() as u64 == storm.stock),
        );
        let _ = writeln!(
            md,
            "| (f) storm, {url}: MySQL connections bounded, at most half of \
             `max_connections` | at most {bench} connections of the component at once; peak \
             `Threads_connected` {peak} ({before} before the release, other clients of the \
             shared server included) of `max_connections` {max} | {verdict} |",
            url = storm.setting,
            bench = storm.peak_bench_connections,
            peak = storm.peak_threads_connected,
            before = storm.threads_connected_before,
            max = storm.max_connections,
            verdict = verdict(storm.peak_bench_connections * 2 <= storm.max_connections),
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
         measurement, divided by the requests answered; of \
         the levels where every answer had the same outcome, the lowest figure (other \
         clients of the shared servers and requests still in flight when the load stops \
         only ever add to a delta). \
         *Redis RT* counts EVALSHA, EVAL and PING, the commands that are a round trip of \
         their own. Each new Redis connection adds the redis crate's handshake, two \
         `CLIENT SETINFO` pipelined into one round trip, which Redis 7.0 refuses (the \
         command came in 7.2): they show as *refused*. MySQL: *MySQL conns* and \
         *statements* are the per-user statistics of `seckill_bench`, the user only the \
         benchmark's Spin applications connect as (*statements* counts every command but \
         the prepared-statement protocol's own: each connection's settings query, the \
         statements a procedure runs); *prepare*, *execute* and *CALL* are the server-wide \
         `Com_stmt_prepare`, `Com_stmt_execute` and `Com_call_procedure` (the last counts \
         the CALLs inside procedures too), where other clients of the shared server add to \
         the figures, as the paths that touch no MySQL show.\n\n\
         | path | Redis RT | Redis conns | refused | MySQL conns | prepare | execute | CALL | statements |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for path in Path::ALL {
        let Some(per) = per_request(r, path) else {
            continue;
        };
        let _ = writeln!(
            md,
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            path.label(),
            per.redis_round_trips(),
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
    for path in [
        Path::SoldOut,
        Path::Duplicate,
        Path::Purchase,
        Path::Polling,
    ] {
        let Some(per) = per_request(r, path) else {
            continue;
        };
        let _ = writeln!(md, "- {}: {}", path.label(), per.commands());
    }
    md.push('\n');
}

fn fractions(md: &mut String, r: &Results) {
    md.push_str(
        "## Each path against its Spin floor\n\n\
         Each product path does at least the work of its floor, under the same Spin: a \
         rejection and a poll open Redis and send one command (the Redis floor), a purchase \
         opens MySQL and runs a statement (the MySQL floor, with the same MySQL URL). \
         *Fraction* is the path's throughput over the floor's at the same level.\n\n\
         | path | level | req/s | floor | floor req/s | fraction |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for path in Path::ALL {
        let Some(floor) = path.floor() else {
            continue;
        };
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
         (At fewer, Spin's 40 ms write stalls, below, leave the cores idle.) Each \
         part is the difference between two measured paths of the same level:\n\n\
         - *instance*: the component's own 404 (no variable, no backend) less the floor \
           component's answer: what seckill's larger instance and its routing cost;\n\
         - *1 variable*: half of what the floor component's reading two variables adds to \
           its answer, with the answer the same;\n\
         - *to 401*: the malformed-token 401 (reads `admin_token` and `jwt_secret`, \
           then gives up) less the 404;\n\
         - *JWT*: the forged-token 401 (the HS256 signature is checked) less the \
           malformed one;\n\
         - *Redis conn + command*: the Redis floor less the Spin floor;\n\
         - *rest*: the sold-out rejection less the forged-token 401 and the Redis part: \
           the variables read after the token, the admission script instead of PING, the \
           lock token, the answer. *In Redis* is the \
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
        "\nA purchase is the MySQL floor (Spin's instance, a MySQL connection, one \
         statement), a rejection's own work beyond Spin's floor (the sold-out path less the \
         Spin floor: instance, variables, JWT, Redis connection, admission) and the rest: \
         the CALL instead of `SELECT 1`, the second script, which settles, and the order's \
         handling. *Ceiling* is what the first two parts alone allow, as a fraction of the \
         MySQL floor: on one machine they share the two cores, so no purchase can do \
         better against the floor here.\n\n\
         | level | purchase | MySQL floor | rejection beyond Spin floor | rest | in Redis | ceiling vs. MySQL floor | purchase vs. MySQL floor |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for (purchase_path, floor_path) in [
        (Path::Purchase, Path::MysqlFloor),
        (Path::PurchaseTcp, Path::MysqlFloorTcp),
    ] {
        for &level in r.levels.iter().filter(|&&level| level >= SATURATED) {
            let at = |path| cost(r, path, level);
            let parts = (
                at(purchase_path),
                at(floor_path),
                at(Path::SoldOut),
                at(Path::SpinFloor),
            );
            let (Some(purchase), Some(mysql), Some(sold), Some(spin)) = parts else {
                continue;
            };
            let rejection = sold - spin;
            let label = if purchase_path == Path::PurchaseTcp {
                format!("{level}, prefer_socket=false")
            } else {
                level.to_string()
            };
            let _ = writeln!(
                md,
                "| {label} | {purchase:.0} µs | {mysql:.0} µs | {rejection:+.0} µs | {:+.0} µs | \
                 {:.0} µs | {:.0} % | {:.0} % |",
                purchase - mysql - rejection,
                redis_usec(r, purchase_path, level).unwrap_or(0.0),
                mysql / (mysql + rejection) * 100.0,
                mysql / purchase * 100.0,
            );
        }
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

fn storms(md: &mut String, r: &Results) {
    let Some(first) = r.storms.first() else {
        return;
    };
    let _ = write!(
        md,
        "## (f) The storm\n\n\
         A voucher with {stock} units and {buyers} distinct buyers pressing once each, all \
         released at one instant through {connections} connections (at most that many \
         requests in flight); every buyer answered `429` (`busy` or `throttled`) presses \
         again after `Retry-After`, until every buyer has a final answer. About every \
         10 ms MySQL's connections are sampled meanwhile: `Threads_connected` (the whole \
         server's, other clients' included) and those of the component's own MySQL user \
         (*component*, what the chart draws). Run with the driver's `prefer_socket` on and \
         with `prefer_socket=false` (spin.toml's default `mysql_url`), each with spin.toml's `max_inflight_purchases` \
         and with 64; the chart's lower panels draw them all.\n\n\
         | setting | sold out after | all answered after | attempts | final answers | every attempt | latency p50 / p99 / max | peak `Threads_connected` | peak, component | MySQL connections per unit sold |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        stock = first.stock,
        buyers = first.buyers,
        connections = first.connections,
    );
    for storm in &r.storms {
        let sold = storm.sold_at.len().max(1) as f64;
        let l = &storm.latency;
        let _ = writeln!(
            md,
            "| {} | {:.2} s | {:.2} s | {} | {} | {} | {:.0} / {:.0} / {:.0} ms | {} of {} | {} | {:.2} |",
            storm.setting,
            storm.sold_out_after,
            storm.seconds,
            storm.attempts,
            outcome_list(&storm.finals),
            outcome_list(&storm.outcomes),
            l.p50_us as f64 / 1000.0,
            l.p99_us as f64 / 1000.0,
            l.max_us as f64 / 1000.0,
            storm.peak_threads_connected,
            storm.max_connections,
            storm.peak_bench_connections,
            storm.server.mysql(USER_CONNECTIONS) as f64 / sold,
        );
    }
    for storm in &r.storms {
        let _ = write!(
            md,
            "\nInvariants, {}:\n\n\
             | invariant | expected | found | |\n| --- | --- | --- | --- |\n",
            storm.setting
        );
        for check in &storm.checks {
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
