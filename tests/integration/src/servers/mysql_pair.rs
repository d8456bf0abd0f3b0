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

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use crate::servers::faults::backend_env;
use crate::servers::mariadb::{migrate, Server, PATIENCE};
use crate::servers::proxy::Proxy;

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

        migrate(primary.port, "seckill").await;

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
