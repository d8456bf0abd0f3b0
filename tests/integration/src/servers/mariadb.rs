//! A private MariaDB server on this machine, for the harnesses that need servers of their
//! own (a failover pair, a Galera cluster): its data under a temp dir, a free loopback
//! port, root over TCP with no password, SIGKILLed on drop. Nothing here touches the
//! shared MariaDB.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Row};

use crate::drivers::app::repo_root;
use crate::servers::faults::{free_port, TempDir};

/// How long a server may take to come up, or the replica to catch up.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// One private `mariadbd`. Killed on drop.
pub struct Server {
    pub port: u16,
    child: Option<Child>,
    dir: TempDir,
}

impl Server {
    /// A fresh data dir with its system tables (root gets in with no password, over TCP
    /// too), blocking.
    pub fn install(label: &str) -> TempDir {
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
    pub fn spawn(dir: TempDir, name: &str, settings: &[String]) -> Server {
        Server::spawn_on(dir, free_port(), name, settings)
    }

    /// [`Server::spawn`] on a given `port`.
    pub fn spawn_on(dir: TempDir, port: u16, name: &str, settings: &[String]) -> Server {
        let child = Some(mariadbd(dir.path(), port, name, settings));
        Server { port, child, dir }
    }

    /// Starts it again on its data and port, after [`Server::kill`].
    pub fn restart(&mut self, name: &str, settings: &[String]) {
        assert!(self.child.is_none(), "port {} is still running", self.port);
        self.child = Some(mariadbd(self.dir.path(), self.port, name, settings));
    }

    /// Its folder: `data/` is the datadir.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Waits until root can log in.
    pub async fn ready(&mut self) {
        let port = self.port;
        let log = self.dir.path().join("error.log");
        super::until_up(
            &format!("mariadbd on port {port}"),
            self.child.as_mut(),
            (PATIENCE, Duration::from_millis(50)),
            || std::fs::read_to_string(&log).unwrap_or_default(),
            async || {
                let Ok(conn) = root_on(port).await else {
                    return false;
                };
                let _ = conn.disconnect().await;
                true
            },
        )
        .await;
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    pub async fn try_admin(&self) -> Result<Conn, mysql_async::Error> {
        root_on(self.port).await
    }

    /// A root connection.
    pub async fn admin(&self) -> Conn {
        self.try_admin()
            .await
            .unwrap_or_else(|e| panic!("root on port {}: {e}", self.port))
    }

    pub async fn run(&self, statements: &[&str]) {
        let mut conn = self.admin().await;
        for statement in statements {
            conn.query_drop(*statement)
                .await
                .unwrap_or_else(|e| panic!("{statement} on port {}: {e}", self.port));
        }
        conn.disconnect().await.unwrap();
    }

    pub async fn value(&self, query: &str) -> String {
        let mut conn = self.admin().await;
        let value: Option<String> = conn.query_first(query).await.unwrap();
        conn.disconnect().await.unwrap();
        value.unwrap_or_default()
    }

    /// A column of `SHOW SLAVE STATUS` ("" when not a replica).
    pub async fn slave_status(&self, column: &str) -> String {
        let mut conn = self.admin().await;
        let row: Option<Row> = conn.query_first("SHOW SLAVE STATUS").await.unwrap();
        conn.disconnect().await.unwrap();
        row.and_then(|row| row.get::<Option<String>, _>(column).flatten())
            .unwrap_or_default()
    }

    /// Waits until this replica has applied `gtid_pos`.
    pub async fn wait_applied(&self, gtid_pos: &str) {
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

    /// Whether it is running: neither killed nor exited.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| child.try_wait().is_ok_and(|status| status.is_none()))
    }

    /// SIGKILL, as a crash. Returns once the process is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `mariadbd` on the data under `path`, listening on `port`.
fn mariadbd(path: &Path, port: u16, name: &str, settings: &[String]) -> Child {
    // --log-basename first: it renames the logs that come after it.
    Command::new("mariadbd")
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
        .expect("mariadbd runs (scripts/services.sh installs MariaDB)")
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

/// Applies the project's migrations (scripts/migrate.sh) on the server at `port`, to
/// database `name` with user `seckill`/`seckill`.
pub async fn migrate(port: u16, name: &str) {
    let name = name.to_string();
    let migrate = tokio::task::spawn_blocking(move || {
        Command::new(repo_root().join("scripts/migrate.sh"))
            .env("DB_ADMIN_ARGS", format!("-h 127.0.0.1 -P {port} -uroot"))
            .env("DB_NAME", name)
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
        "scripts/migrate.sh on port {port}: {}{}",
        String::from_utf8_lossy(&migrate.stdout),
        String::from_utf8_lossy(&migrate.stderr)
    );
}

/// A root connection to the server on `port`.
async fn root_on(port: u16) -> Result<Conn, mysql_async::Error> {
    let opts = OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(port)
        .user(Some("root"))
        .prefer_socket(false);
    Conn::new(opts).await
}
