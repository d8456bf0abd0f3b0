//! A MySQL failover on this machine: a private MariaDB primary and a GTID replica of it,
//! each on a free loopback port with its data under a temp dir, the project's migrations
//! applied (on the primary; they replicate), and a [`Proxy`] in front of the primary that
//! a test points the component at ([`MysqlPair::backend_env`]) and that follows the
//! primary across [`MysqlPair::fail_over`].
//!
//! Replication is asynchronous, or semi-synchronous with `AFTER_SYNC`: the primary writes
//! a commit to its binlog, waits until the replica has it in its relay log, and only then
//! commits in InnoDB and answers the client. Its timeout ([`SEMI_SYNC_TIMEOUT`]) is far
//! longer than any test, so it never falls back to asynchronous replication unseen: while
//! the replica does not receive ([`MysqlPair::lag`]), a commit on the primary blocks until
//! the replica receives again ([`MysqlPair::resume`]) or the primary dies
//! ([`MysqlPair::fail_over`]); its client gets no answer, or a lost connection.
//!
//! Both servers are SIGKILLed on drop. Nothing here touches the shared MariaDB.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Row};

use crate::app::repo_root;
use crate::faults::{backend_env, free_port, TempDir};
use crate::proxy::Proxy;

/// How the primary's commits reach the replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// The primary answers once it has committed; the replica may be behind.
    Async,
    /// Semi-synchronous, `AFTER_SYNC`: the primary answers a commit once the replica has
    /// acknowledged receiving it.
    SemiSync,
}

/// `rpl_semi_sync_master_timeout`: how long a commit waits for the replica before the
/// primary gives up and goes asynchronous. Longer than any test, so it never does.
pub const SEMI_SYNC_TIMEOUT: Duration = Duration::from_secs(3600);

/// How long a server may take to come up, or the replica to catch up.
const PATIENCE: Duration = Duration::from_secs(60);

/// One private `mariadbd`. Killed on drop.
struct Server {
    port: u16,
    child: Option<Child>,
    dir: TempDir,
}

impl Server {
    /// A fresh data dir with its system tables (root gets in with no password, over TCP
    /// too), blocking.
    fn install(label: &str) -> TempDir {
        let dir = TempDir::new(label);
        std::fs::create_dir(dir.path().join("tmp")).unwrap();
        let output = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .arg(tmpdir(dir.path()))
            .args([
                "--auth-root-authentication-method=normal",
                "--user=root",
                "--skip-test-db",
            ])
            .stdin(Stdio::null())
            .output()
            .expect("mariadb-install-db runs (scripts/services.sh installs MariaDB)");
        assert!(
            output.status.success(),
            "mariadb-install-db: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        dir
    }

    /// Starts `mariadbd` on `dir` with `settings` (`name=value`, without the dashes).
    fn spawn(dir: TempDir, name: &str, settings: &[String]) -> Server {
        let port = free_port();
        let path = dir.path();
        // --log-basename first: it renames the logs that come after it.
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--log-basename={name}"))
            .arg(format!("--datadir={}", path.join("data").display()))
            .arg(format!("--port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", path.join("sock").display()))
            .arg(format!("--pid-file={}", path.join("pid").display()))
            .arg(tmpdir(path))
            .arg(format!("--log-error={}", path.join("error.log").display()))
            .args([
                "--user=root",
                // Users are matched by address only: 'seckill'@'127.0.0.1'.
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=32M",
            ])
            .args(settings.iter().map(|setting| format!("--{setting}")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd runs (scripts/services.sh installs MariaDB)");
        Server {
            port,
            child: Some(child),
            dir,
        }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Waits until root can log in.
    async fn ready(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten())
            {
                panic!(
                    "mariadbd on port {} exited ({status}): {}",
                    self.port,
                    self.log_text()
                );
            }
            if let Ok(conn) = self.try_admin().await {
                let _ = conn.disconnect().await;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "mariadbd on port {} did not come up: {}",
                self.port,
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    async fn try_admin(&self) -> Result<Conn, mysql_async::Error> {
        let opts = OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(self.port)
            .user(Some("root"))
            .prefer_socket(false);
        Conn::new(opts).await
    }

    /// A root connection.
    async fn admin(&self) -> Conn {
        self.try_admin()
            .await
            .unwrap_or_else(|e| panic!("root on port {}: {e}", self.port))
    }

    async fn run(&self, statements: &[&str]) {
        let mut conn = self.admin().await;
        for statement in statements {
            conn.query_drop(*statement)
                .await
                .unwrap_or_else(|e| panic!("{statement} on port {}: {e}", self.port));
        }
        conn.disconnect().await.unwrap();
    }

    async fn value(&self, query: &str) -> String {
        let mut conn = self.admin().await;
        let value: Option<String> = conn.query_first(query).await.unwrap();
        conn.disconnect().await.unwrap();
        value.unwrap_or_default()
    }

    /// A column of `SHOW SLAVE STATUS` ("" when not a replica).
    async fn slave_status(&self, column: &str) -> String {
        let mut conn = self.admin().await;
        let row: Option<Row> = conn.query_first("SHOW SLAVE STATUS").await.unwrap();
        conn.disconnect().await.unwrap();
        row.and_then(|row| row.get::<Option<String>, _>(column).flatten())
            .unwrap_or_default()
    }

    /// Waits until this replica has applied `gtid_pos`.
    async fn wait_applied(&self, gtid_pos: &str) {
        if gtid_pos.is_empty() {
            return;
        }
        let mut conn = self.admin().await;
        let reached: Option<i64> = conn
            .exec_first(
                "SELECT MASTER_GTID_WAIT(?, ?)",
                (gtid_pos, PATIENCE.as_secs()),
            )
            .await
            .unwrap();
        conn.disconnect().await.unwrap();
        assert_eq!(
            reached,
            Some(0),
            "the replica on port {} did not apply {gtid_pos}: SQL thread error {:?}",
            self.port,
            self.slave_status("Last_SQL_Error").await
        );
    }

    /// SIGKILL, as a crash. Returns once the process is gone.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A private `--tmpdir`: a starting server deletes every `#sql*` file in its tmpdir, and
/// in a shared /tmp those are the temporary tables of other servers (the shared MariaDB's,
/// another test's install) in use.
fn tmpdir(dir: &Path) -> String {
    format!("--tmpdir={}", dir.join("tmp").display())
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A primary, its replica and a proxy in front of the primary; see the module's doc.
pub struct MysqlPair {
    mode: Replication,
    proxy: Proxy,
    primary: Server,
    replica: Server,
    /// The replica's IO thread is stopped ([`MysqlPair::lag`]).
    lagging: bool,
    /// The primary is dead and the replica promoted ([`MysqlPair::fail_over`]).
    failed_over: bool,
}

impl MysqlPair {
    /// Both servers up, the replica attached, the migrations applied (with database
    /// `seckill` and user `seckill`/`seckill`, by scripts/migrate.sh) and replicated.
    pub async fn start(mode: Replication) -> MysqlPair {
        let (primary_dir, replica_dir) = tokio::join!(
            tokio::task::spawn_blocking(|| Server::install("mysql-primary")),
            tokio::task::spawn_blocking(|| Server::install("mysql-replica")),
        );
        // Both log their binlogs with GTIDs: the replica can become a primary with its
        // history. gtid_strict_mode makes a replica refuse a GTID out of order rather than
        // diverge. Functions in migrations need the trust setting once binlogs are on.
        let common = [
            "log-bin",
            "log-slave-updates=ON",
            "binlog-format=ROW",
            "gtid-strict-mode=ON",
            "log-bin-trust-function-creators=ON",
        ];
        let mut primary_settings: Vec<String> = common.iter().map(|s| s.to_string()).collect();
        let mut replica_settings = primary_settings.clone();
        primary_settings.push("server-id=1".into());
        replica_settings.extend(["server-id=2".into(), "read-only=ON".into()]);
        if mode == Replication::SemiSync {
            primary_settings.extend([
                "rpl-semi-sync-master-enabled=ON".into(),
                "rpl-semi-sync-master-wait-point=AFTER_SYNC".into(),
                format!(
                    "rpl-semi-sync-master-timeout={}",
                    SEMI_SYNC_TIMEOUT.as_millis()
                ),
                // Keep waiting when the replica disconnects (the default, stated).
                "rpl-semi-sync-master-wait-no-slave=ON".into(),
            ]);
            // Only the replica's receiving side: once promoted it has no replica, and a
            // semi-sync primary without one would hold every commit for the timeout.
            replica_settings.push("rpl-semi-sync-slave-enabled=ON".into());
        }
        let mut primary = Server::spawn(
            primary_dir.expect("install primary"),
            "primary",
            &primary_settings,
        );
        let mut replica = Server::spawn(
            replica_dir.expect("install replica"),
            "replica",
            &replica_settings,
        );
        tokio::join!(primary.ready(), replica.ready());

        // Attached before the primary's first write: a semi-sync primary holds every commit
        // while no replica acknowledges it. The replica writes nothing of its own, so its
        // GTIDs are the primary's (strict mode would stop it otherwise).
        let attach = format!(
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={}, MASTER_USER='root', \
             MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
            primary.port
        );
        replica.run(&[&attach, "START SLAVE"]).await;
        if mode == Replication::SemiSync {
            let deadline = Instant::now() + PATIENCE;
            while primary
                .value("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS'")
                .await
                != "1"
            {
                assert!(
                    Instant::now() < deadline,
                    "the replica never attached as semi-sync: {:?}",
                    replica.slave_status("Last_IO_Error").await
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }

        let port = primary.port;
        let migrate = tokio::task::spawn_blocking(move || {
            Command::new(repo_root().join("scripts/migrate.sh"))
                .env("DB_ADMIN_ARGS", format!("-h 127.0.0.1 -P {port} -uroot"))
                .env("DB_NAME", "seckill")
                .env("DB_USER", "seckill")
                .env("DB_PASSWORD", "seckill")
                .env_remove("DB_USER_HOST")
                .stdin(Stdio::null())
                .output()
                .expect("scripts/migrate.sh runs")
        })
        .await
        .unwrap();
        assert!(
            migrate.status.success(),
            "scripts/migrate.sh on the primary: {}{}",
            String::from_utf8_lossy(&migrate.stdout),
            String::from_utf8_lossy(&migrate.stderr)
        );

        let proxy = Proxy::start(primary.addr()).await;
        let pair = MysqlPair {
            mode,
            proxy,
            primary,
            replica,
            lagging: false,
            failed_over: false,
        };
        pair.catch_up().await;
        pair
    }

    pub fn mode(&self) -> Replication {
        self.mode
    }

    /// The primary's own port (dead after [`MysqlPair::fail_over`]).
    pub fn primary_port(&self) -> u16 {
        self.primary.port
    }

    /// The replica's own port: the primary after [`MysqlPair::fail_over`].
    pub fn replica_port(&self) -> u16 {
        self.replica.port
    }

    /// The proxy in front of whichever server is the primary.
    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// `SPIN_VARIABLE_*` settings that point the component at `redis_port` and, through
    /// the proxy, at the primary.
    pub fn backend_env(&self, redis_port: u16) -> Vec<(String, String)> {
        let mut env = backend_env(redis_port, self.proxy.port());
        // The pair's servers hold `seckill` only, whatever database the run's tests use on
        // the shared server.
        for (name, value) in &mut env {
            if name == "SPIN_VARIABLE_MYSQL_URL" {
                *value = format!(
                    "mysql://seckill:seckill@127.0.0.1:{}/seckill?prefer_socket=false",
                    self.proxy.port()
                );
            }
        }
        env
    }

    /// The component's `mysql_url` through the proxy (as [`MysqlPair::backend_env`] sets
    /// it; `prefer_socket=false`, see `proxy`).
    pub fn url(&self) -> String {
        self.backend_env(0)
            .into_iter()
            .find_map(|(name, value)| (name == "SPIN_VARIABLE_MYSQL_URL").then_some(value))
            .expect("backend_env sets SPIN_VARIABLE_MYSQL_URL")
    }

    /// A value of the primary's `SHOW GLOBAL STATUS` (e.g. `Rpl_semi_sync_master_status`,
    /// `Rpl_semi_sync_master_wait_sessions`: commits waiting for the replica now).
    pub async fn primary_status(&self, variable: &str) -> String {
        let server = if self.failed_over {
            &self.replica
        } else {
            &self.primary
        };
        let mut conn = server.admin().await;
        let value: Option<String> = conn
            .exec_first(
                "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = ?",
                (variable.to_uppercase(),),
            )
            .await
            .unwrap();
        conn.disconnect().await.unwrap();
        value.unwrap_or_else(|| panic!("no status variable {variable}"))
    }

    /// Waits until the replica has applied everything the primary has written.
    pub async fn catch_up(&self) {
        assert!(
            !self.lagging && !self.failed_over,
            "the replica is not receiving"
        );
        let pos = self.primary.value("SELECT @@gtid_binlog_pos").await;
        self.replica.wait_applied(&pos).await;
    }

    /// From now on the replica receives nothing (its IO thread stops), once it has all the
    /// primary wrote so far. Asynchronous: the primary goes on committing alone, and a
    /// failover loses those commits. Semi-sync: every commit on the primary blocks, for up
    /// to [`SEMI_SYNC_TIMEOUT`], until [`MysqlPair::resume`] (then it is acknowledged) or
    /// [`MysqlPair::fail_over`] (then its client loses the connection, and the replica,
    /// promoted, never had it).
    pub async fn lag(&mut self) {
        self.catch_up().await;
        self.replica.run(&["STOP SLAVE IO_THREAD"]).await;
        self.lagging = true;
    }

    /// The replica receives again, and catches up (a semi-sync commit held by
    /// [`MysqlPair::lag`] is answered).
    pub async fn resume(&mut self) {
        assert!(
            self.lagging && !self.failed_over,
            "the replica is not lagging"
        );
        self.replica.run(&["START SLAVE IO_THREAD"]).await;
        self.lagging = false;
        self.catch_up().await;
    }

    /// SIGKILLs the primary, promotes the replica once it has applied all it received,
    /// and points the proxy at it (its open connections close). Returns how long that took,
    /// from the kill to the proxy's move. The new primary has no replica (and waits for none:
    /// it is no semi-sync primary).
    pub async fn fail_over(&mut self) -> Duration {
        assert!(!self.failed_over, "already failed over");
        let started = Instant::now();
        self.primary.kill();
        self.replica.run(&["STOP SLAVE IO_THREAD"]).await;
        // Received is not applied: the relay log may still hold acknowledged commits.
        let received = self.replica.slave_status("Gtid_IO_Pos").await;
        self.replica.wait_applied(&received).await;
        self.replica
            .run(&[
                "STOP SLAVE",
                "RESET SLAVE ALL",
                "SET GLOBAL read_only = OFF",
            ])
            .await;
        self.proxy.retarget(self.replica.addr());
        self.failed_over = true;
        self.lagging = false;
        started.elapsed()
    }
}
