//! Loading the application and serving HTTP, the way `spin up` does for a
//! `wasi:http/incoming-handler@0.2.0` component: compile once at start-up,
//! then one fresh store and instance per request.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{anyhow, bail, Context, Result};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderName, HeaderValue, CONNECTION, HOST};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
use wasmtime_wasi_http::{WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use crate::allowed_hosts::AllowedHosts;
use crate::bindings::TestHost;
use crate::instance::{ComponentEnv, SpinHost};
use crate::manifest::Manifest;
use crate::routes::{RouteMatch, Router};
use crate::variables::Resolver;
use crate::Faults;

/// How to start a [`Server`].
#[derive(Debug, Clone)]
pub struct Config {
    /// Path of the application's `spin.toml`; component sources are relative
    /// to its folder.
    pub manifest: PathBuf,
    /// Where to listen; port 0 picks a free port (see [`Server::addr`]).
    pub listen: SocketAddr,
    /// Extra environment entries (e.g. `SPIN_VARIABLE_JWT_SECRET`) that take
    /// precedence over the process environment when resolving variables.
    pub env: Vec<(String, String)>,
    /// Fault switches and counters shared with the test.
    pub faults: Arc<Faults>,
}

/// A running host. Dropping it stops the listener and closes open
/// connections, like [`Server::shutdown`] without waiting.
pub struct Server {
    addr: SocketAddr,
    app: Arc<App>,
    accept_loop: JoinHandle<()>,
}

impl Server {
    /// Loads the manifest, resolves variables (failing if a required one has
    /// no value), compiles the components and starts listening.
    pub async fn start(config: Config) -> Result<Self> {
        let app = Arc::new(App::load(&config).await?);
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("cannot listen on {}", config.listen))?;
        let addr = listener.local_addr()?;
        let accept_loop = tokio::spawn(accept_loop(listener, app.clone()));
        Ok(Self {
            addr,
            app,
            accept_loop,
        })
    }

    /// The address actually listened on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `(route, component id)` pairs, as `spin up` lists them.
    pub fn routes(&self) -> Vec<(String, String)> {
        self.app
            .router
            .routes()
            .map(|(route, component)| (route, component.to_string()))
            .collect()
    }

    /// The value `fermyon:spin/variables.get(name)` returns to `component`,
    /// so a test can check what the guest sees (e.g. an env override).
    pub fn variable(&self, component: &str, name: &str) -> Option<String> {
        self.app.variables.get(component, name).ok()
    }

    /// Stops accepting connections and closes the open ones. Guest
    /// instances still streaming a response body run to completion.
    pub async fn shutdown(mut self) {
        self.accept_loop.abort();
        // The only possible outcome is the cancellation just asked for.
        let _ = (&mut self.accept_loop).await;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

/// Everything requests share.
struct App {
    router: Router,
    variables: Arc<Resolver>,
    components: HashMap<String, Runnable>,
    faults: Arc<Faults>,
}

/// A compiled, linked component ready to be instantiated per request.
struct Runnable {
    pre: ProxyPre<HostState>,
    env: Arc<ComponentEnv>,
    /// The manifest's `environment` for the guest's WASI environment.
    wasi_env: Vec<(String, String)>,
}

impl App {
    async fn load(config: &Config) -> Result<Self> {
        let manifest = Manifest::from_file(&config.manifest)?;
        let overrides = config.env.clone();
        let variables = Arc::new(Resolver::new(&manifest, |key| {
            overrides
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .or_else(|| std::env::var(key).ok())
        })?);
        let router = Router::new(&manifest.http_triggers)?;

        let linker = linker()?;
        let mut components = HashMap::new();
        for trigger in &manifest.http_triggers {
            let id = &trigger.component;
            if components.contains_key(id) {
                continue;
            }
            let decl = &manifest.components[id];
            let hosts = decl
                .allowed_outbound_hosts
                .iter()
                .map(|h| variables.expand_app_template(h))
                .collect::<Result<Vec<_>>>()
                .and_then(|hosts| AllowedHosts::parse(&hosts))
                .with_context(|| format!("component {id:?} allowed_outbound_hosts"))?;
            let component = compile(&decl.source)
                .await
                .with_context(|| format!("component {id:?}"))?;
            let pre = linker
                .instantiate_pre(&component)
                .and_then(ProxyPre::new)
                .map_err(anyhow::Error::from)
                .with_context(|| {
                    format!("component {id:?} cannot be instantiated by this Spin-compatible host")
                })?;
            let env = Arc::new(ComponentEnv {
                id: id.clone(),
                allowed_hosts: hosts,
                variables: variables.clone(),
            });
            let wasi_env = decl.environment.clone().into_iter().collect();
            components.insert(id.clone(), Runnable { pre, env, wasi_env });
        }

        Ok(Self {
            router,
            variables,
            components,
            faults: config.faults.clone(),
        })
    }
}

/// One engine for the whole process, so compiled components can be shared
/// between servers that tests start one after another.
fn engine() -> Result<Engine> {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    if let Some(engine) = ENGINE.get() {
        return Ok(engine.clone());
    }
    let engine = Engine::new(&wasmtime::Config::new())?;
    Ok(ENGINE.get_or_init(|| engine).clone())
}

/// Reads, componentizes and compiles a Wasm file. Compilation takes seconds,
/// so results are cached by content for the life of the process.
async fn compile(source: &Path) -> Result<Component> {
    static COMPILED: OnceLock<Mutex<HashMap<u64, Component>>> = OnceLock::new();
    let bytes = std::fs::read(source)
        .with_context(|| format!("cannot read Wasm source {}", source.display()))?;
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    let key = hasher.finish();
    let cache = COMPILED.get_or_init(Default::default);
    if let Some(component) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(component.clone());
    }
    let engine = engine()?;
    let component = tokio::task::spawn_blocking(move || -> Result<Component> {
        let bytes = componentize(&bytes)?;
        Ok(Component::new(&engine, bytes)?)
    })
    .await??;
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, component.clone());
    Ok(component)
}

/// A wasm32-wasip1 core module becomes a component through the WASI
/// preview1 reactor adapter, as Spin does; a component is used as is.
fn componentize(bytes: &[u8]) -> Result<Vec<u8>> {
    // Bytes 4..8 are the version and layer: layer 1 means a component.
    if bytes.get(6..8) == Some(&[1, 0]) {
        return Ok(bytes.to_vec());
    }
    wit_component::ComponentEncoder::default()
        .validate(true)
        .module(bytes)?
        .adapter(
            "wasi_snapshot_preview1",
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .encode()
        .context("cannot turn the module into a component")
}

/// Links exactly what this host implements: WASI 0.2 (cli, clocks,
/// filesystem, io, random, sockets), wasi:http types and outgoing-handler,
/// and the Spin interfaces. Anything else a component imports makes
/// `instantiate_pre` fail at start-up, naming the missing import.
fn linker() -> Result<Linker<HostState>> {
    let mut linker = Linker::<HostState>::new(&engine()?);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    TestHost::add_to_linker::<_, HasSelf<SpinHost>>(&mut linker, |state| &mut state.spin)?;
    Ok(linker)
}

/// The data of one request's store.
struct HostState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    hooks: DenyOutboundHttp,
    spin: SpinHost,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

/// Outbound HTTP is not implemented: every request gets the error Spin gives
/// for a host that `allowed_outbound_hosts` does not list.
struct DenyOutboundHttp;

impl WasiHttpHooks for DenyOutboundHttp {
    fn send_request(
        &mut self,
        _request: http::Request<WasiBody>,
        _options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
    ) -> Box<
        dyn Future<
                Output = wasmtime_wasi_http::Result<(
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
                )>,
            > + Send,
    > {
        Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) })
    }
}

/// Runs until aborted. Connection tasks live in the set, so aborting the
/// loop (which drops the set) closes them too.
async fn accept_loop(listener: TcpListener, app: Arc<App>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, client) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        eprintln!("test-host: accept failed: {e}");
                        continue;
                    }
                };
                let app = app.clone();
                let service = service_fn(move |req| app.clone().handle(req, client));
                connections.spawn(async move {
                    if let Err(e) = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                    {
                        eprintln!("test-host: error serving HTTP connection: {e}");
                    }
                });
            }
        }
    }
}

impl App {
    async fn handle(
        self: Arc<Self>,
        mut req: Request<Incoming>,
        client: SocketAddr,
    ) -> Result<Response<HyperOutgoingBody>, Infallible> {
        // Transport-level header, meaningless to the guest (Spin drops it).
        req.headers_mut().remove(CONNECTION);
        let path = req.uri().path().to_string();
        if let Some(well_known) = path.strip_prefix("/.well-known/spin/") {
            return Ok(match well_known {
                "health" => response(StatusCode::OK, "OK"),
                _ => response(StatusCode::NOT_FOUND, ""),
            });
        }
        let Some(route) = self.router.route(&path) else {
            return Ok(response(StatusCode::NOT_FOUND, ""));
        };
        let component = &self.components[route.component];
        let result = match prepare_request(&mut req, &route, client) {
            Ok(()) => self.run(component, req).await,
            Err(e) => Err(e),
        };
        self.faults.requests_served.fetch_add(1, Ordering::SeqCst);
        Ok(result.unwrap_or_else(|e| {
            eprintln!("test-host: error processing request: {e:#}");
            response(StatusCode::INTERNAL_SERVER_ERROR, "")
        }))
    }

    /// Runs one request in a fresh instance. The guest keeps running in its
    /// own task after the response head is sent, to stream the body.
    async fn run(
        &self,
        component: &Runnable,
        req: Request<Incoming>,
    ) -> Result<Response<HyperOutgoingBody>> {
        let wasi = WasiCtx::builder()
            .inherit_stdout()
            .inherit_stderr()
            .envs(&component.wasi_env)
            .build();
        let state = HostState {
            wasi,
            http: WasiHttpCtx::new(),
            table: ResourceTable::new(),
            hooks: DenyOutboundHttp,
            spin: SpinHost::new(component.env.clone(), self.faults.clone()),
        };
        let mut store = Store::new(component.pre.engine(), state);
        let proxy = component.pre.instantiate_async(&mut store).await?;
        let request = store
            .data_mut()
            .http()
            .new_incoming_request(Scheme::Http, req)?;
        let (response_tx, response_rx) = oneshot::channel();
        let outparam = store.data_mut().http().new_response_outparam(response_tx)?;

        let guest = tokio::spawn(async move {
            proxy
                .wasi_http_incoming_handler()
                .call_handle(&mut store, request, outparam)
                .await
        });

        match response_rx.await {
            Ok(response) => {
                tokio::spawn(async move {
                    match guest.await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => {
                            eprintln!("test-host: component error after response started: {e:#}")
                        }
                        Err(e) => eprintln!("test-host: guest task failed: {e}"),
                    }
                });
                response.map_err(|code| anyhow!("guest failed to produce a response: {code:?}"))
            }
            Err(_) => {
                guest
                    .await
                    .context("guest invocation panicked")?
                    .map_err(anyhow::Error::from)
                    .context("guest invocation failed")?;
                bail!("guest failed to produce a response prior to returning")
            }
        }
    }
}

/// Gives the request an absolute URI (from its `Host` header) and adds the
/// `spin-*` headers Spin passes to `wasi:http` components.
fn prepare_request(
    req: &mut Request<Incoming>,
    route: &RouteMatch<'_>,
    client: SocketAddr,
) -> Result<()> {
    let host = match req.headers().get(HOST) {
        Some(h) => h
            .to_str()
            .context("'Host' header is not valid UTF-8")?
            .to_string(),
        None => match req.uri().authority() {
            Some(a) => a.to_string(),
            None => bail!("no 'Host' header present in request"),
        },
    };
    let path_and_query = req
        .uri()
        .path_and_query()
        .map_or("/", |pq| pq.as_str())
        .to_string();
    *req.uri_mut() = Uri::builder()
        .scheme("http")
        .authority(host.as_str())
        .path_and_query(path_and_query.as_str())
        .build()
        .context("'Host' header contains an invalid authority")?;

    let headers = [
        ("spin-full-url", format!("http://{host}{path_and_query}")),
        ("spin-path-info", route.path_info.to_string()),
        ("spin-matched-route", route.raw_route.to_string()),
        ("spin-base-path", "/".to_string()),
        ("spin-raw-component-route", route.raw_route.to_string()),
        ("spin-component-route", route.component_route.to_string()),
        ("spin-client-addr", client.to_string()),
    ];
    for (name, value) in headers {
        req.headers_mut().insert(
            HeaderName::from_static(name),
            HeaderValue::from_str(&value)?,
        );
    }
    Ok(())
}

fn response(status: StatusCode, body: &'static str) -> Response<HyperOutgoingBody> {
    let body = if body.is_empty() {
        Empty::new().map_err(|never| match never {}).boxed_unsync()
    } else {
        Full::new(Bytes::from_static(body.as_bytes()))
            .map_err(|never| match never {})
            .boxed_unsync()
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
}
