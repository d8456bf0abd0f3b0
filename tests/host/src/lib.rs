//! A small Spin-compatible test host for one-component HTTP applications.
//!
//! It loads a `spin.toml` (manifest v2), turns the component's wasm32-wasip1
//! module into a component, and serves `wasi:http/incoming-handler@0.2.0` on a
//! loopback port with a fresh instance per request, providing
//! `fermyon:spin/{redis,mysql,rdbms-types,variables}@2.0.0` against real
//! servers with Spin's observable behaviour. See `README.md` beside this crate
//! for the known differences from Spin.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use std::sync::{atomic::Ordering, Arc};
//! let faults = Arc::new(test_host::Faults::default());
//! let server = test_host::Server::start(test_host::Config {
//!     manifest: "spin.toml".into(),
//!     listen: "127.0.0.1:0".parse()?,
//!     env: vec![("SPIN_VARIABLE_JWT_SECRET".into(), "s".into())],
//!     faults: faults.clone(),
//! })
//! .await?;
//! println!("http://{}", server.addr());
//! faults.trap_on_mysql_open.store(true, Ordering::SeqCst);
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod allowed_hosts;
mod instance;
mod manifest;
mod mysql_host;
mod redis_host;
mod routes;
mod server;
mod variables;

use std::sync::atomic::{AtomicBool, AtomicU64};

pub use server::{Config, Server};

/// Test-only switches the host consults while it runs, so a test can make a
/// request die at a chosen point, plus counters to observe what happened.
/// All fields are plain atomics: flip them from the test at any time.
#[derive(Debug, Default)]
pub struct Faults {
    /// When set, `fermyon:spin/mysql` `connection.open` traps instead of
    /// connecting. The instance dies mid-request (after whatever it did in
    /// Redis) and the client gets a 500, exactly as if the instance had
    /// been killed before reaching MySQL.
    pub trap_on_mysql_open: AtomicBool,
    /// How many traps `trap_on_mysql_open` has injected.
    pub injected_traps: AtomicU64,
    /// How many requests were handed to a component and answered (with the
    /// guest's response or a 500). Counted when the response head is ready.
    pub requests_served: AtomicU64,
}

/// Host-side bindings of the Spin interfaces this host provides.
mod bindings {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "fermyon:spin/test-host",
        // Every import may trap: that is how a host failure (or an injected
        // fault) kills the instance, as in Spin.
        imports: { default: async | trappable },
        with: {
            "fermyon:spin/redis.connection": crate::redis_host::RedisConnection,
            "fermyon:spin/mysql.connection": crate::mysql_host::MysqlConnection,
        },
        anyhow: true,
    });
}
