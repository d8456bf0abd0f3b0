//! The built `seckill.wasm`, served by real Spin (`spin up`) on a loopback port, and an
//! HTTP client that speaks its API with real tokens.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{Duration as ChronoDuration, Utc};
use jwt_compact::alg::{Hs256, Hs256Key};
use jwt_compact::{AlgorithmExt, Claims, Header};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::servers::faults::{backend_env, Manifest};
use crate::servers::proxy::Proxy;
use crate::servers::spin::Spin;

pub const JWT_SECRET: &str = "integration-test-jwt-secret-0123456789abcdef";
pub const ADMIN_TOKEN: &str = "integration-test-admin-token";

/// The repository root (where spin.toml lives).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Whether the tests run the WASIp3 build (`SECKILL_BUILD=p3`, under Spin 4), else the
/// default one.
pub fn p3() -> bool {
    std::env::var("SECKILL_BUILD").is_ok_and(|build| build == "p3")
}

/// The manifest of the build under test: spin.toml, or spin-p3.toml.
pub fn manifest() -> PathBuf {
    repo_root().join(if p3() { "spin-p3.toml" } else { "spin.toml" })
}

/// The built component, as `scripts/build.sh` leaves it and [`manifest`] names it.
pub fn component_wasm() -> PathBuf {
    let target = if p3() {
        "wasm32-wasip2"
    } else {
        "wasm32-wasip1"
    };
    repo_root().join(format!("target/{target}/release/seckill.wasm"))
}

/// The built sale page, the manifest's other component: `spin up` loads it too.
pub fn shop_wasm() -> PathBuf {
    repo_root().join("target/wasm32-wasip1/release/seckill_shop.wasm")
}

/// What each component is built from, relative to the repository root: its sources
/// (the component's and those of `seckill-core` in `core/`, which embeds the Lua scripts
/// at build time by core/build.rs; the sale page's static files by `include_str!`) and
/// the workspace's manifest and lock file.
pub const COMPONENT_SOURCES: [&str; 5] = ["src", "core", "lua", "Cargo.toml", "Cargo.lock"];
pub const SHOP_SOURCES: [&str; 5] = [
    "shop/src",
    "shop/static",
    "shop/Cargo.toml",
    "Cargo.toml",
    "Cargo.lock",
];

/// Panics unless `wasm` exists and is newer than every file of `sources` (files, or
/// folders walked recursively; hidden files such as editors' swap files aside), so that a
/// test never runs a build older than the code it means to test. Cargo leaves the .wasm
/// alone when it finds nothing to rebuild (a touched Cargo.toml or Cargo.lock, say):
/// `scripts/build.sh` therefore dates it when a build succeeds, or as the build began
/// when a source changed during it, which keeps that file newer than it.
pub fn assert_built_from_current_sources(wasm: &Path, sources: &[&str]) {
    let built = match std::fs::metadata(wasm).and_then(|m| m.modified()) {
        Ok(built) => built,
        Err(e) => panic!("{}: {e}: run scripts/build.sh first", wasm.display()),
    };
    let root = repo_root();
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut pending: Vec<PathBuf> = sources.iter().map(|s| root.join(s)).collect();
    while let Some(path) = pending.pop() {
        let meta = match std::fs::metadata(&path) {
            Ok(meta) => meta,
            Err(e) => panic!("{}: {e} (a source of {})", path.display(), wasm.display()),
        };
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                let entry = entry.unwrap();
                if !entry.file_name().to_string_lossy().starts_with('.') {
                    pending.push(entry.path());
                }
            }
        } else {
            let modified = meta.modified().unwrap();
            if newest.as_ref().is_none_or(|(time, _)| modified > *time) {
                newest = Some((modified, path));
            }
        }
    }
    if let Some((modified, path)) = newest {
        assert!(
            modified <= built,
            "{} is stale: run scripts/build.sh ({} changed {:?} after it was built)",
            wasm.display(),
            path.strip_prefix(&root).unwrap_or(&path).display(),
            modified.duration_since(built).unwrap_or_default()
        );
    }
}

/// [`assert_built_from_current_sources`] for both components the manifest serves.
pub fn assert_components_fresh() {
    assert_built_from_current_sources(&component_wasm(), &COMPONENT_SOURCES);
    assert_built_from_current_sources(&shop_wasm(), &SHOP_SOURCES);
}

/// A running component and a client for it.
pub struct App {
    spin: Mutex<Spin>,
    pub base: String,
    pub client: reqwest::Client,
}

/// The component on the Redis at `redis_port` and the local MariaDB through a [`Proxy`]
/// (which counts what passes and can cut it), with the manifest it serves, which must
/// outlive it.
pub async fn behind_proxy(redis_port: u16) -> (Proxy, Manifest, App) {
    let proxy = Proxy::start("127.0.0.1:3306".parse().unwrap()).await;
    let manifest = Manifest::with_absolute_paths();
    let app = App::start_with(manifest.path(), backend_env(redis_port, proxy.port())).await;
    (proxy, manifest, app)
}

/// What the component answered.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Answer {
    /// The `error` code of an error answer.
    pub fn error(&self) -> &str {
        self.body["error"].as_str().unwrap_or("")
    }

    /// The `order_id` of a receipt or an `already_ordered` error, which the API sends as
    /// a canonical decimal string; `None` when absent or not such a string.
    pub fn order_id(&self) -> Option<u64> {
        let text = self.body["order_id"].as_str()?;
        let canonical = text.bytes().all(|b| b.is_ascii_digit()) && !text.starts_with('0');
        canonical.then(|| text.parse().ok()).flatten()
    }
}

impl App {
    /// The component as its [`manifest`] describes it, with the test secrets.
    pub async fn start() -> App {
        App::start_with(manifest(), Vec::new()).await
    }

    /// A given manifest (e.g. one pointing at a fault-injecting proxy) and extra
    /// `SPIN_VARIABLE_*` settings on top of the test secrets; on the Redis Cluster named
    /// by `SECKILL_REDIS_CLUSTER_NODES`, when set, whatever Redis `env` names.
    pub async fn start_with(manifest: PathBuf, mut env: Vec<(String, String)>) -> App {
        if let Some(nodes) = crate::servers::local::redis_cluster_nodes() {
            env.extend(crate::servers::redis_cluster::spin_env(nodes));
        }
        let wasm = component_wasm();
        assert!(
            wasm.exists(),
            "{} is missing: run scripts/build.sh first",
            wasm.display()
        );
        assert_components_fresh();
        let mut variables = vec![
            (
                "SPIN_VARIABLE_JWT_SECRET".to_string(),
                JWT_SECRET.to_string(),
            ),
            (
                "SPIN_VARIABLE_ADMIN_TOKEN".to_string(),
                ADMIN_TOKEN.to_string(),
            ),
        ];
        variables.extend(env);
        let spin = Spin::up(&manifest, &variables);
        let base = spin.base();
        let client = http_client(Duration::from_secs(60), 256);
        App {
            spin: Mutex::new(spin),
            base,
            client,
        }
    }

    /// Sends a request; `token` goes in as `Authorization: Bearer <token>`, a JSON `body`
    /// as `application/json`.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        match self.try_call(method, path, token, body).await {
            Ok(answer) => answer,
            Err(e) => panic!(
                "Spin did not answer ({e}); its stderr:\n{}",
                self.spin_stderr()
            ),
        }
    }

    /// `GET path` with `token` and no body.
    pub async fn get(&self, path: &str, token: &str) -> Answer {
        self.call(Method::GET, path, Some(token), None).await
    }

    /// `POST path` with `token` and no body.
    pub async fn post(&self, path: &str, token: &str) -> Answer {
        self.call(Method::POST, path, Some(token), None).await
    }

    /// `GET path` as buyer `user`.
    pub async fn get_as(&self, path: &str, user: u64) -> Answer {
        self.get(path, &buyer_token(user)).await
    }

    /// `POST path` as buyer `user`, with no body.
    pub async fn post_as(&self, path: &str, user: u64) -> Answer {
        self.post(path, &buyer_token(user)).await
    }

    /// [`App::call`], for a request that may get no answer (Spin killed under it).
    pub async fn try_call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> reqwest::Result<Answer> {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        Ok(answer(request.send().await?).await)
    }

    /// The address Spin listens on, for raw HTTP.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.base.trim_start_matches("http://").parse().unwrap()
    }

    /// What Spin printed to stderr so far.
    pub fn spin_stderr(&self) -> String {
        self.spin.lock().unwrap().stderr()
    }

    /// The component's request log so far, one JSON line per request.
    pub fn request_log(&self) -> String {
        self.spin.lock().unwrap().component_stdout()
    }

    /// The request log's lines that name a cause or took a second or more (the last 40):
    /// what a failing test shows of what went on inside.
    pub fn troubles(&self) -> String {
        let log = self.request_log();
        let troubles: Vec<&str> = log
            .lines()
            .filter(|line| {
                serde_json::from_str::<Value>(line).is_ok_and(|entry| {
                    entry.get("cause").is_some()
                        || entry["latency_us"]
                            .as_u64()
                            .is_some_and(|us| us >= 1_000_000)
                })
            })
            .collect();
        troubles[troubles.len().saturating_sub(40)..].join("\n")
    }

    /// Kills Spin (SIGKILL), as a crash of the runtime: requests in flight die there.
    pub fn crash(&self) {
        self.spin.lock().unwrap().kill();
    }

    /// Serves again on the same address after [`App::crash`].
    pub fn restart(&self) {
        self.spin.lock().unwrap().restart();
    }

    /// Creates a live voucher (begun a minute ago, ending in an hour); returns its id.
    pub async fn live_voucher(&self, stock: u64) -> u64 {
        self.voucher(stock, -60, 3600).await
    }

    /// Creates a voucher whose sale runs from `begin` to `end` seconds from now.
    pub async fn voucher(&self, stock: u64, begin: i64, end: i64) -> u64 {
        self.create(json!({"stock": stock}), begin, end).await
    }

    /// Creates a live voucher of `terms` (its `stock`, and any other field of a creation's
    /// body) whose sale runs from `begin` to `end` seconds from now.
    pub async fn create(&self, terms: Value, begin: i64, end: i64) -> u64 {
        self.created(terms, begin, end).await["id"]
            .as_u64()
            .expect("voucher id")
    }

    /// [`App::create`], answering the created voucher as the API describes it.
    pub async fn created(&self, terms: Value, begin: i64, end: i64) -> Value {
        let at = |offset| (Utc::now() + ChronoDuration::seconds(offset)).to_rfc3339();
        let mut body = json!({
            "title": "integration test voucher",
            "begin_time": at(begin),
            "end_time": at(end),
        });
        for (field, value) in terms.as_object().expect("fields") {
            body[field] = value.clone();
        }
        let answer = self
            .call(Method::POST, "/vouchers", Some(ADMIN_TOKEN), Some(body))
            .await;
        assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
        answer.body
    }

    /// `POST /orders/{id}/cancel` as its buyer `user`.
    pub async fn cancel(&self, order_id: u64, user: u64) -> Answer {
        self.post_as(&format!("/orders/{order_id}/cancel"), user)
            .await
    }

    /// `POST /vouchers/{id}/orders` as `user`.
    pub async fn buy(&self, voucher_id: u64, user: u64) -> Answer {
        self.post_as(&format!("/vouchers/{voucher_id}/orders"), user)
            .await
    }

    /// `POST /vouchers/{id}/orders` for `quantity` units, as `{"quantity": n}`.
    pub async fn buy_units(&self, voucher_id: u64, user: u64, quantity: u64) -> Answer {
        let path = format!("/vouchers/{voucher_id}/orders");
        let body = json!({ "quantity": quantity });
        self.call(Method::POST, &path, Some(&buyer_token(user)), Some(body))
            .await
    }
}

pub async fn answer(response: reqwest::Response) -> Answer {
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.expect("a body");
    let body = json_or_text(&bytes);
    Answer {
        status,
        headers,
        body,
    }
}

/// A body as JSON, or as a JSON string of its text when it is none.
pub fn json_or_text(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// An HTTP client whose requests give up after `timeout`, keeping up to `idle` idle
/// connections to a host.
pub fn http_client(timeout: Duration, idle: usize) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .pool_max_idle_per_host(idle)
        .build()
        .unwrap()
}

/// A buyer token for `user`, valid for ten minutes.
pub fn buyer_token(user: u64) -> String {
    signed_token(JWT_SECRET, json!({ "sub": user.to_string() }), Some(600))
}

/// An HS256 token over `custom` claims, signed with `secret`, expiring `exp_in` seconds
/// from now (negative: already expired; `None`: no `exp` at all).
pub fn signed_token(secret: &str, custom: Value, exp_in: Option<i64>) -> String {
    let mut claims = Claims::new(custom);
    claims.expiration = exp_in.map(|secs| Utc::now() + ChronoDuration::seconds(secs));
    Hs256
        .token(&Header::empty(), &claims, &Hs256Key::new(secret.as_bytes()))
        .unwrap()
}
