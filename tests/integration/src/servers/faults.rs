//! Helpers for fault tests that must not disturb the shared Redis and MariaDB: a private
//! `redis-server` the test can kill and restart (or step the wall clock of), a manifest
//! variant that points the component at it (and at a MySQL proxy), reading a sale's state
//! from that Redis, and a tally of the answers a scenario got.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use seckill_core::sale::Keys;
use seckill_core::BucketId;

use crate::drivers::app::{repo_root, Answer};
use crate::drivers::invariants::{self, SaleRecord};

/// A folder under the system temp dir, removed on drop but by a failing test.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "seckill-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A failing test's folder stays for whoever reads the failure: a Spin app's log
        // (its component's request log and errors) is often the cause.
        if std::thread::panicking() {
            eprintln!("kept for the failing test: {}", self.0.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A port nobody listens on right now (the OS picks it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// How a private Redis keeps its data across a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing on disk: a restart starts empty (and with an empty script cache).
    None,
    /// Append-only file, fsynced after every write.
    AofAlways,
    /// Append-only file, fsynced once a second: a machine that dies loses up to the last
    /// second of writes ([`RedisServer::aof_len`] and [`RedisServer::cut_aof`] play that).
    AofEverysec,
}

/// A `redis-server` of the test's own on a free loopback port. Killed on drop.
pub struct RedisServer {
    port: u16,
    persistence: Persistence,
    /// The primary's port, for a replica.
    replica_of: Option<u16>,
    /// The offset file of the libfaketime clock it runs on (see [`RedisServer::set_clock`]).
    clock: Option<PathBuf>,
    dir: TempDir,
    child: Option<Child>,
}

impl RedisServer {
    pub async fn start(persistence: Persistence) -> RedisServer {
        RedisServer::spawn_new(persistence, None, false).await
    }

    /// A server whose wall clock the test steps with [`RedisServer::set_clock`], as an NTP
    /// step or a failover to a server whose clock lags moves `TIME`; it starts on the real
    /// time. Its monotonic clock, which Redis times itself by, is left alone, as such a step
    /// leaves it.
    pub async fn start_with_fake_clock() -> RedisServer {
        RedisServer::spawn_new(Persistence::None, None, true).await
    }

    /// A replica of `primary`, once it holds everything the primary acknowledged.
    pub async fn start_replica(primary: &RedisServer) -> RedisServer {
        let replica = RedisServer::spawn_new(Persistence::None, Some(primary.port), false).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let acked: i64 = redis::cmd("WAIT")
                .arg(1)
                .arg(1000)
                .query_async(&mut primary.conn().await)
                .await
                .unwrap();
            if acked == 1 {
                return replica;
            }
            assert!(Instant::now() < deadline, "the replica never caught up");
        }
    }

    async fn spawn_new(
        persistence: Persistence,
        replica_of: Option<u16>,
        fake_clock: bool,
    ) -> RedisServer {
        let dir = TempDir::new("redis");
        let mut server = RedisServer {
            port: free_port(),
            persistence,
            replica_of,
            clock: fake_clock.then(|| dir.path().join("faketime")),
            dir,
            child: None,
        };
        if fake_clock {
            // libfaketime reads the real clock while its file is missing.
            server.set_clock(0);
        }
        server.spawn().await;
        server
    }

    /// Sets the wall clock of a [`RedisServer::start_with_fake_clock`] server `offset_s`
    /// seconds off the real one, from its next reading on (back when negative).
    pub fn set_clock(&self, offset_s: i64) {
        let file = self
            .clock
            .as_ref()
            .expect("a server started with a fake clock");
        // Renamed into place: libfaketime rereads the file at every reading, and must never
        // find it half written.
        let next = file.with_extension("next");
        std::fs::write(&next, format!("{offset_s:+}\n")).unwrap();
        std::fs::rename(&next, file).unwrap();
    }

    /// Promotes a replica to a primary of its own: it keeps what it had received, and
    /// no longer follows its primary.
    pub async fn promote(&self) {
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query_async(&mut self.conn().await)
            .await
            .unwrap();
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) {
        assert!(self.child.is_none(), "redis-server already running");
        let (appendonly, fsync) = match self.persistence {
            Persistence::None => ("no", "always"),
            Persistence::AofAlways => ("yes", "always"),
            Persistence::AofEverysec => ("yes", "everysec"),
        };
        let replica_of = self
            .replica_of
            .map(|port| {
                vec![
                    "--replicaof".to_string(),
                    "127.0.0.1".into(),
                    port.to_string(),
                ]
            })
            .unwrap_or_default();
        let clock = self.clock.as_deref().map(faketime_env);
        let child = Command::new("redis-server")
            .envs(clock.into_iter().flatten())
            .args(["--port", &self.port.to_string()])
            .args(replica_of)
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", appendonly])
            .args(["--appendfsync", fsync])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--logfile", "redis.log"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (scripts/services.sh installs it)");
        self.child = Some(child);
        let log = self.dir.path().join("redis.log");
        let url = self.url();
        super::until_up(
            &format!("redis-server on port {}", self.port),
            self.child.as_mut(),
            (Duration::from_secs(10), Duration::from_millis(20)),
            || std::fs::read_to_string(&log).unwrap_or_default(),
            async || {
                let Ok(mut conn) = connect_within_a_second(&url).await else {
                    return false;
                };
                let pong: Result<String, _> = redis::cmd("PING").query_async(&mut conn).await;
                pong.as_deref() == Ok("PONG")
            },
        )
        .await;
    }

    /// SIGKILL, as a crash: nothing is flushed beyond what the persistence mode already
    /// wrote. Returns once the process is gone and the port is closed.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        while self.try_connect().await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Starts it again on the same port with the same data folder.
    /// The append-only file's incremental part, and its length now.
    pub fn aof_len(&self) -> (PathBuf, u64) {
        let dir = self.dir.path().join("appendonlydir");
        let incr = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .find(|path| path.to_string_lossy().ends_with(".incr.aof"))
            .expect("an incremental AOF file");
        let len = std::fs::metadata(&incr).unwrap().len();
        (incr, len)
    }

    /// Cuts the append-only file back to what [`RedisServer::aof_len`] saw, as if the
    /// writes since had never reached the disk (the server must be down).
    pub fn cut_aof(&self, (incr, len): &(PathBuf, u64)) {
        assert!(self.child.is_none(), "redis-server is running");
        let file = std::fs::OpenOptions::new().write(true).open(incr).unwrap();
        file.set_len(*len).unwrap();
    }

    pub async fn restart(&mut self) {
        self.spawn().await;
    }

    async fn try_connect(&self) -> redis::RedisResult<MultiplexedConnection> {
        connect_within_a_second(&self.url()).await
    }

    pub async fn conn(&self) -> MultiplexedConnection {
        self.try_connect().await.expect("private redis-server")
    }

    /// The sale as MySQL holds it, with the Redis side read from this server.
    pub async fn sale(&self, voucher_id: u64) -> SaleRecord {
        invariants::read_with(voucher_id, self.conn().await).await
    }

    /// A buyer's record in the voucher's `buyers` hash (`q:<ticket>` or `o:<order id>`).
    pub async fn buyer_record(&self, voucher_id: u64, user: u64) -> Option<String> {
        self.conn()
            .await
            .hget(Keys::new(BucketId::from_raw(voucher_id)).buyers(), user)
            .await
            .unwrap()
    }
}

/// The environment that runs a program on libfaketime's clock, offset by the number in
/// `file` (reread at every reading; only the wall clock moves), with libfaketime as Debian's
/// `faketime` installs it (`scripts/services.sh`).
fn faketime_env(file: &Path) -> Vec<(&'static str, OsString)> {
    let multiarch = format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH);
    let libfaketime = format!("{multiarch}/faketime/libfaketime.so.1");
    assert!(
        Path::new(&libfaketime).exists(),
        "{libfaketime} is missing: scripts/services.sh installs it (Debian's `faketime`)"
    );
    // glibc's allocator goes first: Debian's redis-server allocates with jemalloc, which
    // reads the clock while it starts, and libfaketime allocates while it starts, so the
    // two deadlock (libfaketime issue #130). Redis's own allocations take glibc's then.
    let preload = format!("{multiarch}/libc_malloc_debug.so.0 {libfaketime}");
    vec![
        ("LD_PRELOAD", preload.into()),
        ("FAKETIME_TIMESTAMP_FILE", file.into()),
        ("FAKETIME_NO_CACHE", "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
    ]
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A copy of the build's manifest ([`crate::drivers::app::manifest`]) in a temp folder, with `source` made absolute and the outbound
/// hosts (and so the backends the component may reach) replaced.
pub struct Manifest {
    dir: TempDir,
}

impl Manifest {
    /// The manifest with its components' paths made absolute; the backends it may reach
    /// come from `SPIN_VARIABLE_REDIS_ADDRESS` and `SPIN_VARIABLE_MYSQL_ADDRESS` ([`backend_env`]).
    pub fn with_absolute_paths() -> Manifest {
        let original = std::fs::read_to_string(crate::drivers::app::manifest()).unwrap();
        let mut sources = 0;
        let rewritten: Vec<String> = original
            .lines()
            .map(|line| match line.strip_prefix("source = ") {
                Some(source) => {
                    sources += 1;
                    let wasm = repo_root().join(source.trim_matches('"'));
                    format!("source = {:?}", wasm.display().to_string())
                }
                None => line.to_string(),
            })
            .collect();
        assert!(sources > 0, "spin.toml no longer has `source` lines");
        let dir = TempDir::new("manifest");
        std::fs::write(dir.path().join("spin.toml"), rewritten.join("\n") + "\n").unwrap();
        Manifest { dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("spin.toml")
    }
}

/// The commands a Redis server ran (from INFO commandstats, without INFO itself: the
/// measuring) and the connections it accepted, read over one connection kept for it.
pub async fn redis_counters(conn: &mut MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("all")
        .query_async(conn)
        .await
        .unwrap();
    let mut calls = 0;
    let mut connections = 0;
    for line in info.lines() {
        if let Some(rest) = line.strip_prefix("cmdstat_") {
            let (name, stats) = rest.split_once(':').unwrap();
            if name != "info" {
                let n = stats.split(',').next().unwrap();
                calls += n.strip_prefix("calls=").unwrap().parse::<u64>().unwrap();
            }
        }
        if let Some(n) = line.strip_prefix("total_connections_received:") {
            connections = n.trim().parse().unwrap();
        }
    }
    (calls, connections)
}

/// `SPIN_VARIABLE_*` settings that point the component at these backends. The MySQL
/// URL turns off `prefer_socket`: the driver would otherwise leave a loopback TCP
/// address for the server's Unix socket (see `proxy`).
pub fn backend_env(redis_port: u16, mysql_port: u16) -> Vec<(String, String)> {
    vec![
        (
            "SPIN_VARIABLE_REDIS_URL".into(),
            format!("redis://127.0.0.1:{redis_port}"),
        ),
        (
            "SPIN_VARIABLE_REDIS_ADDRESS".into(),
            format!("redis://127.0.0.1:{redis_port}"),
        ),
        (
            "SPIN_VARIABLE_MYSQL_URL".into(),
            // The run's database, which the tests' own reads use too (a proxy in front
            // of the shared server forwards to it).
            format!(
                "mysql://seckill:seckill@127.0.0.1:{mysql_port}/{}?prefer_socket=false",
                crate::servers::local::db_name()
            ),
        ),
        (
            "SPIN_VARIABLE_MYSQL_ADDRESS".into(),
            format!("mysql://127.0.0.1:{mysql_port}"),
        ),
    ]
}

/// Counts the answers a scenario got, by status and error code, and keeps the
/// acknowledged orders as (order id, user id) for `SaleRecord::assert_sound`.
#[derive(Default)]
pub struct Tally {
    pub counts: BTreeMap<(u16, String), u64>,
    pub acknowledged: Vec<(u64, u64)>,
}

impl Tally {
    /// Records an answer to a purchase by `user`; panics on any 5xx but 503
    /// `unavailable`.
    pub fn purchase(&mut self, user: u64, answer: &Answer) {
        let status = answer.status.as_u16();
        assert!(
            status < 500 || (status == 503 && answer.error() == "unavailable"),
            "buyer {user}: {answer:?}"
        );
        if status == 201 {
            let id = answer.order_id().expect("a receipt has an order id");
            assert_eq!(answer.body["user_id"], user.to_string(), "{answer:?}");
            self.acknowledged.push((id, user));
        }
        self.count(status, answer.error());
    }

    fn count(&mut self, status: u16, code: &str) {
        *self.counts.entry((status, code.to_string())).or_default() += 1;
    }

    /// Records a purchase that got no answer: Spin was killed while it was in flight.
    pub fn died(&mut self) {
        self.count(0, "no answer");
    }

    pub fn of(&self, status: u16, code: &str) -> u64 {
        self.counts
            .get(&(status, code.to_string()))
            .copied()
            .unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} requests:", self.total())?;
        for ((status, code), n) in &self.counts {
            let code = if code.is_empty() { "ok" } else { code };
            write!(f, " {status} {code} x{n};")?;
        }
        Ok(())
    }
}

/// A connection to the Redis at `url`, or an error once a second has gone by.
async fn connect_within_a_second(url: &str) -> redis::RedisResult<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    tokio::time::timeout(
        Duration::from_secs(1),
        client.get_multiplexed_async_connection(),
    )
    .await
    .unwrap_or_else(|_| Err((redis::ErrorKind::IoError, "connect timed out").into()))
}
