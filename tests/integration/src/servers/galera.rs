//! A MariaDB Galera cluster on this machine: three private nodes on loopback ports, with
//! their data under temp dirs, and a [`Proxy`] in front that a test points the component
//! at ([`Galera::backend_env`]). The proxy spreads connections over the nodes round robin,
//! so every node takes writes ([`Writers::Every`]), or sends them all to the first node
//! that answers, the others standing by ([`Writers::One`]); either way it skips a dead
//! node, as a balancer with health checks does.
//!
//! Each test gets a database of its own, with the project's migrations applied (on one
//! node: they replicate). It is created with the servers' own default character set
//! (latin1, since they start with `--no-defaults`), before the migrations: as a team that
//! creates its own database would have it.
//!
//! The tests of one run that wait for a cluster take the same nodes in turn (starting them
//! is most of a short test's time): the first test starts them, and they are SIGKILLed
//! when no test holds or awaits them any more, or at once after a test that failed, left
//! a node down or changed a setting. Nothing here touches the shared MariaDB.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use tokio::sync::OwnedMutexGuard;

use crate::servers::faults::{backend_env, TempDir};
use crate::servers::mariadb::{migrate, Server, PATIENCE};
use crate::servers::proxy::Proxy;

/// Which nodes take the component's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writers {
    /// Every node, in turn: writes on all three at once.
    Every,
    /// The first node that answers; the others are hot standbys.
    One,
}

/// How many nodes.
pub const NODES: usize = 3;

/// One node: its server, and the three ports Galera uses above the server's (group
/// communication, incremental state transfer, full state transfer).
struct Node {
    server: Server,
    galera: u16,
}

/// Four free loopback ports in a row, for a node's server and its Galera ports: below
/// the ephemeral range (32768 on), where the ports other servers and clients are given
/// by the system (`free_port`) are not, and below scripts/cluster.sh's Sentinel (26481),
/// whose tests run while this suite does (scripts/test.sh).
fn free_ports() -> u16 {
    loop {
        let base = 20_000 + 4 * (rand_u16() % 1_500);
        if (0..4).all(|k| TcpListener::bind(("127.0.0.1", base + k)).is_ok()) {
            return base;
        }
    }
}

/// A number that differs from call to call and from test to test.
fn rand_u16() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    hasher.write_u128(now.unwrap_or_default().as_nanos());
    hasher.finish() as u16
}

/// The nodes, up and synced, and the databases handed out on them so far.
struct Nodes {
    nodes: Vec<Node>,
    addresses: String,
    databases: usize,
}

/// The cluster the tests take in turn (see the module's doc): one at a time, so that two
/// clusters never start at once either (each is three servers, and two state transfers at
/// once on a small machine only time each other out). It lives while a test holds or
/// awaits it.
fn shared() -> Arc<tokio::sync::Mutex<Option<Nodes>>> {
    static SHARED: Mutex<Weak<tokio::sync::Mutex<Option<Nodes>>>> = Mutex::new(Weak::new());
    let mut slot = SHARED.lock().unwrap();
    slot.upgrade().unwrap_or_else(|| {
        let nodes = Arc::default();
        *slot = Arc::downgrade(&nodes);
        nodes
    })
}

/// A cluster of [`NODES`] behind a proxy, with a database of the test's own; see the
/// module's doc.
pub struct Galera {
    nodes: OwnedMutexGuard<Option<Nodes>>,
    proxy: Proxy,
    database: String,
    /// Each node's `SHOW GLOBAL STATUS` counters when the test took it (none for a node
    /// started since): [`Galera::counted`] counts from there.
    counters: Vec<BTreeMap<String, u64>>,
    /// A setting changed on the nodes: the next test gets nodes of its own.
    changed: bool,
}

impl Galera {
    /// The nodes up and synced (started unless an earlier test left them), a database of
    /// the test's own created latin1 and migrated, and the proxy in front.
    pub async fn start(writers: Writers) -> Galera {
        let mut turn = shared().lock_owned().await;
        // Out of the turn until the cluster is ready: a failure on the way stops them.
        let mut nodes = match turn.take() {
            Some(nodes) => nodes,
            None => Nodes::start().await,
        };
        nodes.databases += 1;
        let database = format!("seckill_{}", nodes.databases);
        let first = &nodes.nodes[0].server;
        first.run(&[&format!("CREATE DATABASE {database}")]).await;
        migrate(first.port, &database).await;
        let upstreams = nodes.nodes.iter().map(|node| node.server.addr()).collect();
        let proxy = match writers {
            Writers::Every => Proxy::round_robin(upstreams).await,
            Writers::One => Proxy::first_answering(upstreams).await,
        };
        *turn = Some(nodes);
        let mut cluster = Galera {
            nodes: turn,
            proxy,
            database,
            counters: Vec::new(),
            changed: false,
        };
        cluster.all_synced().await;
        for n in 0..NODES {
            let counters = cluster.nodes()[n].counters().await;
            cluster.counters.push(counters);
        }
        cluster
    }

    fn nodes(&self) -> &[Node] {
        &self.nodes.as_ref().unwrap().nodes
    }

    fn node(&mut self, n: usize) -> &mut Node {
        &mut self.nodes.as_mut().unwrap().nodes[n]
    }

    /// `SPIN_VARIABLE_*` settings that point the component at `redis_port` and, through
    /// the proxy, at the cluster.
    pub fn backend_env(&self, redis_port: u16) -> Vec<(String, String)> {
        let mut env = backend_env(redis_port, self.proxy.port());
        for (name, value) in &mut env {
            if name == "SPIN_VARIABLE_MYSQL_URL" {
                *value = self.url();
            }
        }
        env
    }

    /// The component's `mysql_url`: the test's database, through the proxy.
    pub fn url(&self) -> String {
        format!(
            "mysql://seckill:seckill@127.0.0.1:{}/{}?prefer_socket=false",
            self.proxy.port(),
            self.database
        )
    }

    /// Node `n`'s own port.
    pub fn port(&self, n: usize) -> u16 {
        self.nodes()[n].server.port
    }

    pub fn proxy(&self) -> &Proxy {
        &self.proxy
    }

    /// SIGKILLs node `n`, as a crash. The proxy skips it from then on.
    pub fn kill(&mut self, n: usize) {
        self.node(n).server.kill();
    }

    /// Starts node `n` again on its data; returns once it has rejoined and synced. A node
    /// SIGKILLed takes a full state transfer, whose rsync runs as `nobody`: the files the
    /// server wrote as root become `nobody`'s first.
    pub async fn restart(&mut self, n: usize) {
        let addresses = self.nodes.as_ref().unwrap().addresses.clone();
        let node = self.node(n);
        give_to_nobody(&node.server.dir().join("data"), true);
        let settings = node_settings(&addresses, node.galera);
        node.server.restart(&format!("galera-{n}"), &settings);
        node.server.ready().await;
        node.synced().await;
        self.counters[n].clear();
    }

    /// Runs `statement` as root on every live node (a `SET GLOBAL`, say).
    pub async fn on_every_node(&mut self, statement: &str) {
        self.changed = true;
        for node in self.nodes() {
            if node.server.try_admin().await.is_ok() {
                node.server.run(&[statement]).await;
            }
        }
    }

    /// The sum over the live nodes of a `SHOW GLOBAL STATUS` counter (e.g.
    /// `wsrep_local_cert_failures`, `wsrep_local_bf_aborts`) since the test took them.
    pub async fn counted(&self, variable: &str) -> u64 {
        let mut total = 0;
        for (node, before) in self.nodes().iter().zip(&self.counters) {
            if node.server.try_admin().await.is_ok() {
                let now = node.status(variable).await.parse::<u64>().unwrap_or(0);
                let before = before.get(&variable.to_uppercase()).copied();
                total += now.saturating_sub(before.unwrap_or(0));
            }
        }
        total
    }

    /// Waits until every live node is synced.
    pub async fn all_synced(&self) {
        for node in self.nodes() {
            if node.server.try_admin().await.is_ok() {
                node.synced().await;
            }
        }
    }
}

impl Drop for Galera {
    /// The nodes go to the next test only as a fresh start would leave them: every node
    /// up and no setting changed, and not after a failure (whose nodes' folders are kept
    /// for whoever reads it).
    fn drop(&mut self) {
        let down = self
            .nodes
            .as_mut()
            .unwrap()
            .nodes
            .iter_mut()
            .any(Node::down);
        if std::thread::panicking() || self.changed || down {
            *self.nodes = None;
        }
    }
}

impl Nodes {
    /// Every node up and synced, one after another.
    async fn start() -> Nodes {
        let ports: Vec<u16> = (0..NODES).map(|_| free_ports()).collect();
        let galera: Vec<u16> = ports.iter().map(|port| port + 1).collect();
        let addresses = galera
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut nodes = Vec::new();
        for (n, port) in galera.iter().enumerate() {
            let dir = if n == 0 {
                tokio::task::spawn_blocking(|| Server::install("galera-0"))
                    .await
                    .unwrap()
            } else {
                joiner_dir(n)
            };
            let name = format!("galera-{n}");
            let mut settings = node_settings(&addresses, *port);
            if n == 0 {
                settings.push("wsrep-new-cluster".into());
            }
            let mut server = Server::spawn_on(dir, ports[n], &name, &settings);
            // One at a time: a joiner takes its state from a node already synced.
            server.ready().await;
            let node = Node {
                server,
                galera: *port,
            };
            node.synced().await;
            nodes.push(node);
        }
        Nodes {
            nodes,
            addresses,
            databases: 0,
        }
    }
}

impl Node {
    /// A `SHOW GLOBAL STATUS` value; "" while the node lets nobody in (a joiner between
    /// its start and the end of its state transfer may).
    async fn status(&self, variable: &str) -> String {
        let Ok(mut conn) = self.server.try_admin().await else {
            return String::new();
        };
        let value: Option<String> = conn
            .exec_first(
                "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
                 WHERE VARIABLE_NAME = ?",
                (variable.to_uppercase(),),
            )
            .await
            .unwrap_or_default();
        let _ = conn.disconnect().await;
        value.unwrap_or_default()
    }

    /// Its `SHOW GLOBAL STATUS` counters, by name in capitals.
    async fn counters(&self) -> BTreeMap<String, u64> {
        let mut conn = self.server.admin().await;
        let rows: Vec<(String, String)> = conn
            .query("SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS")
            .await
            .unwrap();
        let _ = conn.disconnect().await;
        rows.into_iter()
            .filter_map(|(name, value)| Some((name, value.parse().ok()?)))
            .collect()
    }

    /// Whether its server was killed or has exited.
    fn down(&mut self) -> bool {
        !self.server.running()
    }

    /// Waits until the node reads `Synced`.
    async fn synced(&self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let state = self.status("wsrep_local_state_comment").await;
            if state == "Synced" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "galera node on port {} is {state:?}: {}",
                self.server.port,
                self.server.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A joiner's folder: an empty datadir, which the state transfer fills. rsync's daemon
/// runs as `nobody` under a root server, so the datadir must be `nobody`'s.
fn joiner_dir(n: usize) -> TempDir {
    let dir = TempDir::new(&format!("galera-{n}"));
    std::fs::create_dir(dir.path().join("tmp")).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    give_to_nobody(&data, false);
    dir
}

/// Makes `data` (and all below it, if `whole`) belong to `nobody`.
fn give_to_nobody(data: &std::path::Path, whole: bool) {
    let chown = std::process::Command::new("chown")
        .args(whole.then_some("-R"))
        .arg("nobody:nogroup")
        .arg(data)
        .status()
        .expect("chown runs");
    assert!(chown.success(), "chown nobody {}", data.display());
}

/// A node's settings: the cluster's addresses, and its own Galera ports from `galera`.
fn node_settings(addresses: &str, galera: u16) -> Vec<String> {
    vec![
        "wsrep-on=ON".into(),
        "wsrep-provider=/usr/lib/galera/libgalera_smm.so".into(),
        format!("wsrep-cluster-address=gcomm://{addresses}"),
        format!("wsrep-node-address=127.0.0.1:{galera}"),
        format!(
            "wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:{galera};ist.recv_addr=127.0.0.1:{}",
            galera + 1
        ),
        format!("wsrep-sst-receive-address=127.0.0.1:{}", galera + 2),
        "wsrep-sst-method=rsync".into(),
        "binlog-format=ROW".into(),
        "innodb-autoinc-lock-mode=2".into(),
        "log-bin-trust-function-creators=ON".into(),
    ]
}
