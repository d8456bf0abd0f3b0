//! A fault-injecting TCP proxy for MySQL, on a loopback port between Spin and MariaDB: the component reaches MySQL only through it (see `faults::Manifest`), and a
//! test cuts it, slows it down, or lets MySQL commit and then loses the reply.
//!
//! The component's `mysql_url` must carry `prefer_socket=false` (`faults::backend_env`
//! adds it, as does spin.toml's default): Spin's MySQL driver (`mysql_async`) otherwise asks
//! the server for its Unix socket after the handshake and moves the connection there
//! whenever the host is loopback, so the proxy would see only the handshake.
//!
//! Why not a proxy crate: `noxious` (the Rust port of Toxiproxy) had its last release in
//! 2021, pulls tokio-util 0.6 and mockall_double into the build, and is run as a server
//! configured over HTTP; its toxics are byte-level, so none of them can "forward
//! `COM_STMT_EXECUTE`, let the server commit, then drop the reply", which is the one
//! ambiguous failure that matters here. This file is small and knows just enough of
//! the MySQL protocol (packet framing and the command byte) for that.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The command bytes of the two ways to run a statement: as text, and a prepared
/// statement's execution.
const COM_QUERY: u8 = 0x03;
const COM_STMT_EXECUTE: u8 = 0x17;

/// What the proxy did, for the tests to assert on and print.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections accepted and forwarded to MySQL.
    pub forwarded: AtomicU64,
    /// Forwarded connections open right now.
    pub open: AtomicU64,
    /// The most forwarded connections open at once (reset with [`Proxy::reset_peak`]).
    pub peak_open: AtomicU64,
    /// Connections accepted and closed at once because the proxy was cut.
    pub refused: AtomicU64,
    /// Open connections closed by a cut.
    pub severed: AtomicU64,
    /// Statements passed to MySQL (so a test can tell its traffic went this way).
    pub statements: AtomicU64,
    /// Statements received from the client, whether passed on yet or still held.
    pub statements_arrived: AtomicU64,
    /// Replies to statements dropped after MySQL had run them.
    pub replies_lost: AtomicU64,
}

struct Shared {
    /// Where new connections go ([`Proxy::retarget`] moves them), in turn: each connection
    /// to the next one that answers, as a balancer that skips a dead server.
    upstreams: Mutex<Vec<SocketAddr>>,
    /// Connections handed out, for the turns; `None` when each goes to the first that
    /// answers.
    turn: Option<AtomicU64>,
    cut: AtomicBool,
    latency_ms: AtomicU64,
    /// How many more replies to `COM_STMT_EXECUTE` to lose.
    lose_statement_replies: AtomicU64,
    /// Bumped by every cut; open connections close when it changes.
    generation: watch::Sender<u64>,
    stats: Arc<ProxyStats>,
}

/// A running proxy. Dropping it stops accepting and closes every connection.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept_loop: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        Proxy::over(vec![upstream], None).await
    }

    /// Listens on a free loopback port and forwards each connection to the next of
    /// `upstreams` in turn (round robin), past any that does not answer.
    pub async fn round_robin(upstreams: Vec<SocketAddr>) -> Proxy {
        Proxy::over(upstreams, Some(AtomicU64::new(0))).await
    }

    /// Listens on a free loopback port and forwards each connection to the first of
    /// `upstreams` that answers.
    pub async fn first_answering(upstreams: Vec<SocketAddr>) -> Proxy {
        Proxy::over(upstreams, None).await
    }

    async fn over(upstreams: Vec<SocketAddr>, turn: Option<AtomicU64>) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstreams: Mutex::new(upstreams),
            turn,
            cut: AtomicBool::new(false),
            latency_ms: AtomicU64::new(0),
            lose_statement_replies: AtomicU64::new(0),
            generation: watch::channel(0).0,
            stats: Arc::default(),
        });
        let accept_loop = tokio::spawn(accept_loop(listener, shared.clone()));
        Proxy {
            addr,
            shared,
            accept_loop,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn stats(&self) -> Arc<ProxyStats> {
        self.shared.stats.clone()
    }

    /// Starts counting [`ProxyStats::peak_open`] again from the connections open now.
    pub fn reset_peak(&self) {
        let stats = &self.shared.stats;
        stats
            .peak_open
            .store(stats.open.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    /// MySQL becomes unreachable: open connections are closed and new ones are closed
    /// as soon as they are accepted, before MySQL's greeting.
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        self.shared.generation.send_modify(|g| *g += 1);
    }

    /// MySQL is reachable again.
    pub fn restore(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }

    /// New connections go to `upstream` from now on, and open ones are closed (counted as
    /// severed): a proxy that follows the primary across a failover. No connection to the
    /// old upstream outlives the call.
    pub fn retarget(&self, upstream: SocketAddr) {
        *self.shared.upstreams.lock().unwrap() = vec![upstream];
        // After the store: a connection that read the old upstream subscribed before this
        // bump (see `accept_loop`), so it is closed by it.
        self.shared.generation.send_modify(|g| *g += 1);
    }

    /// Every chunk, in both directions, is held this long before it is passed on (the
    /// delay does not add up over chunks in flight: each waits from when it arrived).
    pub fn set_latency(&self, latency: Duration) {
        self.shared
            .latency_ms
            .store(latency.as_millis() as u64, Ordering::SeqCst);
    }

    /// The next `count` statements (`COM_QUERY` other than the driver's own
    /// `SELECT @@...` at connect, or `COM_STMT_EXECUTE`) reach MySQL, which runs (and
    /// commits) them, but their replies are dropped and the connection closed: the
    /// client cannot know whether the statement ran.
    pub fn lose_statement_replies(&self, count: u64) {
        self.shared
            .lose_statement_replies
            .store(count, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept_loop.abort();
        // Closes the open connections too.
        self.shared.cut.store(true, Ordering::SeqCst);
        self.shared.generation.send_modify(|g| *g += 1);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        // Subscribe before looking at `cut`: a cut either is seen here (refused) or
        // comes after the subscription (severed), never in between.
        let generation = shared.generation.subscribe();
        if shared.cut.load(Ordering::SeqCst) {
            shared.stats.refused.fetch_add(1, Ordering::SeqCst);
            drop(client);
            continue;
        }
        tokio::spawn(serve(client, shared.clone(), generation));
    }
}

async fn serve(client: TcpStream, shared: Arc<Shared>, mut generation: watch::Receiver<u64>) {
    let upstreams = shared.upstreams.lock().unwrap().clone();
    let first = shared
        .turn
        .as_ref()
        .map_or(0, |turn| turn.fetch_add(1, Ordering::SeqCst) as usize);
    let mut server = None;
    for at in 0..upstreams.len() {
        if let Ok(stream) = TcpStream::connect(upstreams[(first + at) % upstreams.len()]).await {
            server = Some(stream);
            break;
        }
    }
    let Some(server) = server else {
        return;
    };
    shared.stats.forwarded.fetch_add(1, Ordering::SeqCst);
    let _open = Open::new(&shared.stats);
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // Set once a statement whose reply is to be lost has been passed to MySQL.
    let losing = Arc::new(AtomicBool::new(false));
    tokio::select! {
        _ = upstream(client_read, server_write, shared.clone(), losing.clone()) => {}
        _ = downstream(server_read, client_write, shared.clone(), losing) => {}
        _ = generation.changed() => {
            shared.stats.severed.fetch_add(1, Ordering::SeqCst);
        }
    }
    // Both halves of both sockets drop here: the connections close.
}

/// Counts a forwarded connection as open until dropped.
struct Open<'a>(&'a ProxyStats);

impl<'a> Open<'a> {
    fn new(stats: &'a ProxyStats) -> Open<'a> {
        let open = stats.open.fetch_add(1, Ordering::SeqCst) + 1;
        stats.peak_open.fetch_max(open, Ordering::SeqCst);
        Open(stats)
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One item on its way through the proxy: when it arrived, its bytes, and whether it is
/// a statement (text or prepared).
type Item = (Instant, Vec<u8>, bool);

/// Client to server, one whole MySQL packet at a time so that the command byte can be
/// read. A statement whose reply is to be lost sets `losing` just before it is passed
/// on (MySQL cannot answer it earlier).
async fn upstream(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shared: Arc<Shared>,
    losing: Arc<AtomicBool>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Item>();
    let shared_in = shared.clone();
    let reader = async move {
        loop {
            let mut header = [0u8; 4];
            if from.read_exact(&mut header).await.is_err() {
                return;
            }
            let length = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
            let mut packet = vec![0u8; 4 + length];
            packet[..4].copy_from_slice(&header);
            if from.read_exact(&mut packet[4..]).await.is_err() {
                return;
            }
            // Sequence id 0 starts a command; its first payload byte names it.
            let is_statement = header[3] == 0
                && match packet.get(4) {
                    Some(&COM_STMT_EXECUTE) => true,
                    Some(&COM_QUERY) => !packet[5..].starts_with(b"SELECT @@"),
                    _ => false,
                };
            if is_statement {
                shared_in
                    .stats
                    .statements_arrived
                    .fetch_add(1, Ordering::SeqCst);
            }
            if tx.send((Instant::now(), packet, is_statement)).is_err() {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((arrived, bytes, is_statement)) = rx.recv().await {
            hold(&shared, arrived).await;
            if is_statement {
                shared.stats.statements.fetch_add(1, Ordering::SeqCst);
                let lose = shared.lose_statement_replies.fetch_update(
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                    |n| n.checked_sub(1),
                );
                if lose.is_ok() {
                    losing.store(true, Ordering::SeqCst);
                }
            }
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    };
    // When the reader stops, the writer still passes on what it holds, then stops.
    tokio::join!(reader, writer);
}

/// Server to client, in plain chunks. Once `losing` is set, the next reply is dropped
/// and the connection ends.
async fn downstream(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shared: Arc<Shared>,
    losing: Arc<AtomicBool>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Item>();
    let stats = shared.stats.clone();
    let reader = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if losing.load(Ordering::SeqCst) {
                stats.replies_lost.fetch_add(1, Ordering::SeqCst);
                return;
            }
            if tx
                .send((Instant::now(), buffer[..n].to_vec(), false))
                .is_err()
            {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((arrived, bytes, _)) = rx.recv().await {
            hold(&shared, arrived).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    };
    // When the reader stops, the writer still passes on what it holds, then stops.
    tokio::join!(reader, writer);
}

/// Waits until `arrived` plus the latency in force.
async fn hold(shared: &Shared, arrived: Instant) {
    let latency = Duration::from_millis(shared.latency_ms.load(Ordering::SeqCst));
    tokio::time::sleep_until(arrived + latency).await;
}
