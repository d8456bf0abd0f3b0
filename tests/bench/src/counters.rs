//! The servers' own counters, read before and after every measurement: Redis
//! `INFO commandstats` and `INFO stats`, MariaDB `SHOW GLOBAL STATUS`. Per-request figures
//! are the deltas divided by the requests, so they count what really reached the servers
//! rather than what the code is believed to send.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use anyhow::{Context, Result};
use mysql_async::prelude::Queryable;
use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};

use seckill_core::sale::Keys;
use seckill_core::BucketId;
use seckill_tests::servers::local;

/// The MariaDB status counters kept. `Questions` counts the statements clients send
/// (not those a stored procedure runs); the `Com_*` counters count both.
const MYSQL_STATUS: [&str; 8] = [
    "Connections",
    "Questions",
    "Com_stmt_prepare",
    "Com_stmt_execute",
    "Com_stmt_close",
    "Com_call_procedure",
    "Com_select",
    "Com_show_status",
];

/// The MySQL user the benchmark's Spin applications connect as, and the one that reads
/// the counters (scripts/bench.sh creates both): MariaDB's per-user statistics then count
/// the applications' statements and connections apart from any other client's. The
/// options are spin.toml's default `mysql_url`'s.
pub const BENCH_MYSQL_URL: &str = "mysql://seckill_bench:seckill_bench@127.0.0.1:3306/seckill\
     ?prefer_socket=false&max_allowed_packet=4194304&wait_timeout=28800";
const BENCH_USER: &str = "seckill_bench";
const PROBE_MYSQL_URL: &str = "mysql://seckill_probe:seckill_probe@127.0.0.1:3306";

/// Redis commands that are a round trip of their own on the measured paths: the scripts,
/// a queued purchase's blocking wait for its outcome, and the floor's PING. The redis
/// crate's connection handshake (two CLIENT SETINFO, pipelined into one round trip) is
/// counted apart, per connection.
pub const REDIS_ROUND_TRIPS: [&str; 4] = ["evalsha", "eval", "blpop", "ping"];

/// The command only `lua/publish.lua` runs, once per batch published: its count is the
/// number of batches.
pub const PUBLISH_MARK: &str = "ltrim";

/// Keys of `ServerDelta::mysql` from MariaDB's per-user statistics of the benchmark's user.
pub const USER_CONNECTIONS: &str = "user: connections";
pub const USER_STATEMENTS: &str = "user: statements";

/// Counter values, or differences between two readings.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServerDelta {
    /// Calls by command, as Redis names them in `cmdstat_<name>`; commands run inside
    /// Lua scripts are counted too.
    pub redis_calls: BTreeMap<String, u64>,
    /// Microseconds Redis spent in each command (a script's inner commands included in
    /// the script's own time).
    #[serde(default)]
    pub redis_usec: BTreeMap<String, u64>,
    pub redis_connections: u64,
    /// Error replies: Redis 7.0 refuses the two CLIENT SETINFO of every new connection
    /// (the command came in 7.2), and commandstats does not count refused commands.
    pub redis_error_replies: u64,
    pub mysql: BTreeMap<String, u64>,
}

impl ServerDelta {
    /// What happened between two readings, less the readings' own INFO and SHOW STATUS
    /// (saturating: a CONFIG RESETSTAT in between must not panic the run).
    pub fn since(&self, before: &ServerDelta) -> ServerDelta {
        let minus = |after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>| {
            after
                .iter()
                .map(|(name, n)| {
                    (
                        name.clone(),
                        n.saturating_sub(before.get(name).copied().unwrap_or(0)),
                    )
                })
                .filter(|(_, n)| *n > 0)
                .collect::<BTreeMap<_, _>>()
        };
        let mut redis_calls = minus(&self.redis_calls, &before.redis_calls);
        redis_calls.remove("info");
        let mut redis_usec = minus(&self.redis_usec, &before.redis_usec);
        redis_usec.remove("info");
        let mut mysql = minus(&self.mysql, &before.mysql);
        if let Some(own) = mysql.remove("Com_show_status") {
            if let Some(questions) = mysql.get_mut("Questions") {
                *questions = questions.saturating_sub(own);
            }
        }
        ServerDelta {
            redis_calls,
            redis_usec,
            redis_connections: self
                .redis_connections
                .saturating_sub(before.redis_connections),
            redis_error_replies: self
                .redis_error_replies
                .saturating_sub(before.redis_error_replies),
            mysql,
        }
    }

    /// Adds another delta's counts to this one's.
    pub fn add(&mut self, other: &ServerDelta) {
        let plus = |mine: &mut BTreeMap<String, u64>, theirs: &BTreeMap<String, u64>| {
            for (name, n) in theirs {
                *mine.entry(name.clone()).or_default() += n;
            }
        };
        plus(&mut self.redis_calls, &other.redis_calls);
        plus(&mut self.redis_usec, &other.redis_usec);
        plus(&mut self.mysql, &other.mysql);
        self.redis_connections += other.redis_connections;
        self.redis_error_replies += other.redis_error_replies;
    }

    pub fn redis(&self, command: &str) -> u64 {
        self.redis_calls.get(command).copied().unwrap_or(0)
    }

    pub fn mysql(&self, counter: &str) -> u64 {
        self.mysql.get(counter).copied().unwrap_or(0)
    }

    pub fn redis_round_trips(&self) -> u64 {
        REDIS_ROUND_TRIPS.iter().map(|c| self.redis(c)).sum()
    }
}

/// The commands the Lua scripts in `lua/` call: Redis counts them in commandstats like
/// any other, but they cost no round trip. Read from the folder, so that a new script is
/// known without a change here.
pub fn script_commands() -> BTreeSet<String> {
    let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/../../lua");
    let sources: Vec<String> = std::fs::read_dir(folder)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "lua"))
        .filter_map(|entry| std::fs::read_to_string(entry.path()).ok())
        .collect();
    sources
        .iter()
        .flat_map(|source| source.split("redis.call('").skip(1))
        .filter_map(|rest| rest.split('\'').next())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// MySQL's open connections at one moment.
pub struct Connections {
    /// `Threads_connected`: every client's.
    pub server: u64,
    /// The benchmark's Spin applications'.
    pub component: u64,
    /// How long the applications' longest-running statement has been running, in ms.
    pub running_ms: u64,
    /// How long the oldest connection still in its handshake has been waiting, in ms.
    pub handshake_ms: u64,
}

/// The user MariaDB's PROCESSLIST names a connection by before it has authenticated.
const HANDSHAKING: &str = "unauthenticated user";

/// Kept connections to both servers, for reading their counters.
pub struct Servers {
    redis: MultiplexedConnection,
    mysql: mysql_async::Conn,
}

impl Servers {
    pub async fn connect() -> Result<Servers> {
        let mysql = mysql_async::Conn::from_url(PROBE_MYSQL_URL)
            .await
            .context("MariaDB at 127.0.0.1:3306 as seckill_probe (scripts/bench.sh creates it)")?;
        Ok(Servers {
            redis: local::redis().await,
            mysql,
        })
    }

    pub async fn read(&mut self) -> Result<ServerDelta> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .arg("stats")
            .query_async(&mut self.redis)
            .await?;
        let (redis_calls, redis_usec, stats) = parse_info(&info);
        let names = MYSQL_STATUS.map(|name| format!("'{name}'")).join(",");
        let rows: Vec<(String, String)> = self
            .mysql
            .query(format!(
                "SHOW GLOBAL STATUS WHERE Variable_name IN ({names})"
            ))
            .await?;
        let mut mysql: BTreeMap<String, u64> = rows
            .into_iter()
            .filter_map(|(name, value)| Some((name, value.parse().ok()?)))
            .collect();
        // Statements as MariaDB's userstat counts them: every command but the prepared
        // statement protocol's own (prepare, execute, close).
        let user: Option<(u64, u64)> = self
            .mysql
            .exec_first(
                "SELECT TOTAL_CONNECTIONS, SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS \
                 FROM information_schema.USER_STATISTICS WHERE USER = ?",
                (BENCH_USER,),
            )
            .await?;
        let (connections, statements) = user.unwrap_or_default();
        mysql.insert(USER_CONNECTIONS.into(), connections);
        mysql.insert(USER_STATEMENTS.into(), statements);
        Ok(ServerDelta {
            redis_calls,
            redis_usec,
            redis_connections: stats
                .get("total_connections_received")
                .copied()
                .unwrap_or(0),
            redis_error_replies: stats.get("total_error_replies").copied().unwrap_or(0),
            mysql,
        })
    }

    /// Runs `measure` between two readings; returns its result and what the servers did.
    pub async fn around<T>(
        &mut self,
        measure: impl std::future::Future<Output = Result<T>>,
    ) -> Result<(T, ServerDelta)> {
        let before = self.read().await?;
        let result = measure.await?;
        // Requests still in flight when the load generator stopped finish on the server
        // side in well under this; they are then counted here rather than in the next
        // measurement.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let after = self.read().await?;
        Ok((result, after.since(&before)))
    }

    /// MySQL's connections open now: all of them (`Threads_connected`, this reader's own
    /// and other clients' included) and the benchmark's applications' alone; how long
    /// the applications' longest-running statement has been running, and the longest
    /// any connection still in its handshake has been waiting (MariaDB lists those as
    /// `unauthenticated user`, whoever they are), in ms.
    pub async fn connections_now(&mut self) -> Result<Connections> {
        let row: Option<(u64, u64, u64, u64)> = self
            .mysql
            .exec_first(
                "SELECT (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
                 WHERE VARIABLE_NAME = 'THREADS_CONNECTED'), \
                 CAST(COALESCE(SUM(USER = ?), 0) AS UNSIGNED), \
                 CAST(COALESCE(MAX(IF(USER = ? AND COMMAND <> 'Sleep', TIME_MS, 0)), 0) AS UNSIGNED), \
                 CAST(COALESCE(MAX(IF(USER = ?, 0, TIME_MS)), 0) AS UNSIGNED) \
                 FROM information_schema.PROCESSLIST WHERE USER IN (?, ?)",
                (BENCH_USER, BENCH_USER, BENCH_USER, BENCH_USER, HANDSHAKING),
            )
            .await?;
        let (server, component, running_ms, handshake_ms) = row.context("Threads_connected")?;
        Ok(Connections {
            server,
            component,
            running_ms,
            handshake_ms,
        })
    }

    /// The units of a voucher's cancelled and expired orders given back to its sale, as
    /// Redis counted them (`units:returned`, kept by `lua/restock.lua`).
    pub async fn units_returned(&mut self, voucher_id: u64) -> Result<u64> {
        let metrics = Keys::new(BucketId::from_raw(voucher_id)).metrics();
        let given: Option<u64> = redis::cmd("HGET")
            .arg(metrics)
            .arg("units:returned")
            .query_async(&mut self.redis)
            .await?;
        Ok(given.unwrap_or(0))
    }

    /// The buyers waiting in the sale's line, in the order of their places (every
    /// quantity's sorted set).
    pub async fn line_order(&mut self, voucher_id: u64) -> Result<Vec<u64>> {
        let mut placed: Vec<(f64, u64)> = Vec::new();
        for line in Keys::new(BucketId::from_raw(voucher_id)).lines() {
            let entrants: Vec<(u64, f64)> = redis::cmd("ZRANGE")
                .arg(line)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut self.redis)
                .await?;
            placed.extend(entrants.into_iter().map(|(user, place)| (place, user)));
        }
        placed.sort_by(|a, b| a.0.total_cmp(&b.0));
        Ok(placed.into_iter().map(|(_, user)| user).collect())
    }

    /// The buyers a sale's line handed units to who have not looked or pressed since
    /// (`drawn`, kept by `lua/admission.lua`).
    pub async fn drawn(&mut self, voucher_id: u64) -> Result<HashSet<u64>> {
        let drawn = Keys::new(BucketId::from_raw(voucher_id)).drawn();
        let users: Vec<u64> = redis::cmd("HKEYS")
            .arg(drawn)
            .query_async(&mut self.redis)
            .await?;
        Ok(users.into_iter().collect())
    }

    pub async fn max_connections(&mut self) -> Result<u64> {
        let max: Option<u64> = self.mysql.query_first("SELECT @@max_connections").await?;
        max.context("max_connections")
    }

    /// Redis's and MariaDB's versions, as the servers report them.
    pub async fn versions(&mut self) -> Result<(String, String)> {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut self.redis)
            .await?;
        let redis = info
            .lines()
            .find_map(|line| line.strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .trim()
            .to_string();
        let mariadb: Option<String> = self.mysql.query_first("SELECT VERSION()").await?;
        Ok((redis, mariadb.unwrap_or_default()))
    }
}

type Counts = BTreeMap<String, u64>;

/// Calls and microseconds from the `cmdstat_<name>:calls=N,usec=N,...` lines, and the
/// other `name:N` lines.
fn parse_info(info: &str) -> (Counts, Counts, Counts) {
    let mut calls = BTreeMap::new();
    let mut usec = BTreeMap::new();
    let mut stats = BTreeMap::new();
    for line in info.lines() {
        if let Some(stat) = line.strip_prefix("cmdstat_") {
            let Some((name, fields)) = stat.split_once(':') else {
                continue;
            };
            let field = |prefix: &str| {
                fields
                    .split(',')
                    .find_map(|field| field.strip_prefix(prefix))
                    .and_then(|n| n.parse().ok())
            };
            if let Some(n) = field("calls=") {
                calls.insert(name.to_string(), n);
            }
            if let Some(n) = field("usec=") {
                usec.insert(name.to_string(), n);
            }
        } else if let Some((name, value)) = line.split_once(':') {
            if let Ok(n) = value.trim().parse() {
                stats.insert(name.to_string(), n);
            }
        }
    }
    (calls, usec, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_calls_and_connections_from_info() {
        let info = "# Commandstats\r\n\
            cmdstat_evalsha:calls=12,usec=30,usec_per_call=2.50,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_client|setinfo:calls=4,usec=1,usec_per_call=0.25,rejected_calls=0,failed_calls=0\r\n\
            # Stats\r\ntotal_connections_received:7\r\ntotal_error_replies:2\r\n";
        let (calls, usec, stats) = parse_info(info);
        assert_eq!(calls["evalsha"], 12);
        assert_eq!(usec["evalsha"], 30);
        assert_eq!(calls["client|setinfo"], 4);
        assert_eq!(stats["total_connections_received"], 7);
        assert_eq!(stats["total_error_replies"], 2);
    }

    #[test]
    fn deltas_leave_out_the_readings_themselves() {
        let reading = |evalsha: u64, info: u64, questions: u64, shows: u64| ServerDelta {
            redis_calls: [("evalsha".into(), evalsha), ("info".into(), info)].into(),
            redis_usec: BTreeMap::new(),
            redis_connections: evalsha,
            redis_error_replies: 0,
            mysql: [
                ("Questions".into(), questions),
                ("Com_show_status".into(), shows),
            ]
            .into(),
        };
        let delta = reading(110, 6, 50, 9).since(&reading(10, 5, 40, 8));
        assert_eq!(delta.redis_calls, [("evalsha".into(), 100)].into());
        assert_eq!(delta.redis_connections, 100);
        assert_eq!(delta.mysql, [("Questions".into(), 9)].into());
    }

    #[test]
    fn knows_the_commands_the_scripts_run() {
        let inside = script_commands();
        for command in ["hmget", "time", PUBLISH_MARK] {
            assert!(inside.contains(command), "{command}");
        }
        for command in REDIS_ROUND_TRIPS {
            assert!(!inside.contains(command), "{command}");
        }
    }

    #[test]
    fn only_publish_runs_the_publish_mark() {
        let folder = concat!(env!("CARGO_MANIFEST_DIR"), "/../../lua");
        let call = format!("redis.call('{}'", PUBLISH_MARK.to_ascii_uppercase());
        let mut running: Vec<String> = std::fs::read_dir(folder)
            .unwrap()
            .flatten()
            .filter(|entry| {
                std::fs::read_to_string(entry.path()).is_ok_and(|text| text.contains(&call))
            })
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        running.sort();
        assert_eq!(running, ["publish.lua"]);
    }
}
