//! The HTTP application: a public listener for System One and an admin
//! listener for metrics and health. Handlers authenticate, check the request
//! against its contract, call the provider and release the answer through
//! `release` (the same pure path the offline replay uses).

mod body;
mod error;
mod handlers;
pub(crate) mod listener;
mod middleware;
pub(crate) mod multipart;
mod reload;
mod routes;
mod trace;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::auth::Keys;
use crate::metrics::Metrics;
use crate::upstream::Upstreams;
use releasegate_core::config::{Config, Provider, Server};

pub use error::Error;
pub use listener::{MAX_HEAD_BUFFER_BYTES, MAX_HEADER_FIELDS};
pub use middleware::{MAX_HEADER_BYTES, SDK_REQUEST_ID_HEADER};
pub use reload::ReloadError;

/// Header carrying the proxy's own request id on every response (also sent
/// as `x-typesafe-request-id`, which the official SDKs read).
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Shared state of both listeners.
#[derive(Clone, Debug)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The reloadable configuration. A request loads it once and keeps that generation to
    /// the end; a reload swaps in a new one for the requests that start after it.
    live: ArcSwap<Live>,
    /// `[server]`, fixed at start (a reload that changes it is refused).
    server: Server,
    metrics: Metrics,
    ready: AtomicBool,
    request_ids: middleware::RequestIds,
    /// Serializes reloads (SIGHUP and the file watch): load, check and swap as one step.
    reloading: std::sync::Mutex<()>,
    /// The release decision log, started by `Application::build` when configured.
    decisions: std::sync::OnceLock<crate::decisions::DecisionLog>,
    /// The contracts' live captures by contract name, started by `Application::build`
    /// (fixed at start: a reload that changes one is refused).
    captures: std::sync::OnceLock<std::collections::BTreeMap<String, crate::capture::Capture>>,
    /// The span exporter, started by `Application::build` when `[tracing]` names one.
    otel: std::sync::OnceLock<crate::otel::Exporter>,
}

/// One configuration generation and what is built from it.
#[derive(Debug)]
struct Live {
    config: Config,
    keys: Keys,
    upstreams: Upstreams,
    limits: crate::ratelimit::Limits,
    /// The released-answer series of every contract's questions.
    answer_series: crate::metrics::AnswerSeries,
    /// The request series of every contract, kept as requests first count in them.
    request_series: crate::metrics::RequestSeries,
}

impl Live {
    /// Builds the providers' clients, the key table and the rate limits of `config`
    /// (keeping the unchanged buckets of `previous`).
    fn new(config: Config, metrics: &Metrics, previous: Option<&Live>) -> Result<Live, StartError> {
        let upstreams = Upstreams::new(&config, metrics.clone())?;
        let keys = Keys::new(&config.recipients);
        let loops = config.server.event_loops(crate::cpus::available().count);
        let limits = crate::ratelimit::Limits::new(
            &config.recipients,
            config
                .rate_limit_store
                .as_ref()
                .map(|store| (store, metrics, loops)),
            previous.map(|live| &live.limits),
        );
        let answer_series = metrics.answer_series(&config);
        let request_series = metrics.request_series(&config);
        Ok(Live {
            config,
            keys,
            upstreams,
            limits,
            answer_series,
            request_series,
        })
    }
}

/// How long the admin listener's own connections may take to finish once
/// the public listener has drained.
const ADMIN_DRAIN: Duration = Duration::from_secs(1);

/// A bound, ready-to-run application.
#[derive(Debug)]
pub struct Application {
    public: listener::Listener,
    admin: listener::Listener,
    connections: listener::ConnectionMetrics,
    state: AppState,
}

/// Startup failures.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot bind {addr}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The providers could not be set up (the HTTP client, a provider URL or key).
    #[error(transparent)]
    Upstream(#[from] crate::upstream::SetupError),
    /// Metrics could not be registered.
    #[error("cannot register metrics")]
    Metrics(#[from] prometheus::Error),
    /// The operating system's random generator failed (request ids need its key).
    #[error("cannot draw a key from the operating system's random generator")]
    Random(#[source] std::io::Error),
    /// The span exporter could not be set up.
    #[error("tracing.otlp_endpoint: cannot export spans: {0}")]
    Tracing(String),
    /// `server.certification = "required"` and a contract or recipient with a policy has no
    /// certificate for what it would serve (one line each).
    #[error(
        "server.certification = \"required\": not certified:\n  - {}",
        .0.join("\n  - ")
    )]
    Uncertified(Vec<String>),
    /// The decision log cannot be written where configured.
    #[error("decision_log.path: cannot write {path}")]
    DecisionLog {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A contract's capture file cannot be written where configured.
    #[error("contracts.{contract}.capture.path: cannot write {path}")]
    Capture {
        /// The contract.
        contract: String,
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

// === impl Application ===

impl Application {
    /// Builds every dependency once (`AppState::prepare`), then binds both listeners.
    pub async fn build(config: Config) -> Result<Application, StartError> {
        let bind = |addr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::Bind { addr, source })
        };
        let (listen, admin_listen) = (config.server.listen(), config.server.admin_listen());
        let state = AppState::prepare(config)?;
        let public = bind(listen).await?;
        let admin = bind(admin_listen).await?;
        // The bound addresses (port 0 picks one): how a supervisor finds the proxy.
        if let (Ok(public), Ok(admin)) = (public.local_addr(), admin.local_addr()) {
            tracing::info!(%public, %admin, "listeners bound");
        }
        let connections = listener::ConnectionMetrics::register(state.inner.metrics.registry())?;
        let live = state.live();
        if let Some(settings) = &live.config.decision_log {
            let log = crate::decisions::DecisionLog::start(
                settings,
                state.inner.metrics.decision_log_dropped.clone(),
            )
            .map_err(|source| StartError::DecisionLog {
                path: sink_name(settings.sink()),
                source,
            })?;
            let _ = state.inner.decisions.set(log);
        }
        let mut captures = std::collections::BTreeMap::new();
        for (contract, settings) in &live.config.captures {
            let capture = crate::capture::Capture::start(contract, settings, &state.inner.metrics)
                .map_err(|source| StartError::Capture {
                    contract: contract.clone(),
                    path: settings.path().display().to_string(),
                    source,
                })?;
            captures.insert(contract.clone(), capture);
        }
        let _ = state.inner.captures.set(captures);
        if let Some(tracing) = &live.config.tracing {
            let exporter = crate::otel::Exporter::start(tracing).map_err(StartError::Tracing)?;
            tracing::info!(
                endpoint = tracing.otlp_endpoint(),
                "exporting spans over OTLP/HTTP"
            );
            let _ = state.inner.otel.set(exporter);
        }
        let config = &live.config;
        let server = &state.inner.server;
        let upstream_fds = config
            .providers
            .values()
            .map(|provider| match provider {
                Provider::SystemOne(remote) => listener::upstream_fds(
                    remote.max_concurrency(),
                    server.event_loops(crate::cpus::available().count),
                ),
                Provider::Simulated => 0,
            })
            .fold(0usize, usize::saturating_add);
        let public = listener::Listener {
            name: "public",
            tcp: public,
            limits: listener::Limits {
                max_connections: listener::fit_to_fd_limit(
                    server.max_connections(),
                    server.admin_max_connections(),
                    upstream_fds,
                ),
                header_read_timeout: server.header_read_timeout(),
                idle_timeout: server.idle_timeout(),
            },
            refusal: Some(head_refusal(state.clone())),
        };
        let admin = listener::Listener {
            name: "admin",
            tcp: admin,
            limits: listener::Limits {
                max_connections: server.admin_max_connections(),
                header_read_timeout: server.header_read_timeout(),
                idle_timeout: server.idle_timeout(),
            },
            refusal: None,
        };
        Ok(Application {
            public,
            admin,
            connections,
            state,
        })
    }

    /// The bound public port.
    pub fn port(&self) -> u16 {
        self.public.tcp.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// The bound admin port.
    pub fn admin_port(&self) -> u16 {
        self.admin.tcp.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// The shared state (metrics, config).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` resolves, then drains.
    ///
    /// The public listener is served by `server.event_loops(cpus)` event loops (with
    /// `worker_threads = 0`, one per CPU of the cgroup's quota rounded up, `crate::cpus`):
    /// the calling task's runtime and one thread per further loop, each with
    /// its own single-threaded runtime, accept loop and upstream clients, so a
    /// connection and its upstream calls stay on one thread (no wake-ups
    /// across threads). The loops share the connection cap, the state and the
    /// metrics. The admin listener runs on the calling runtime.
    ///
    /// The drain:
    ///
    /// 1. `/readyz` answers 503 at once; the public listener keeps accepting
    ///    for `drain_delay` so that load balancers notice first;
    /// 2. the public listener stops accepting; its connections finish their
    ///    current request and close, for at most `shutdown_grace`, after which
    ///    the remaining ones are dropped;
    /// 3. only then does the admin listener stop (its connections get
    ///    `ADMIN_DRAIN`), so `/readyz` and `/metrics` answer throughout.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let server = self.state.inner.server.clone();
        let public_addr = self.public.tcp.local_addr()?;
        let admin_addr = self.admin.tcp.local_addr()?;
        let public_cap = self.public.limits.max_connections;
        let cpus = crate::cpus::available();
        let loops = server.event_loops(cpus.count).max(1);
        let (public_stage, public_rx) = watch::channel(listener::Stage::Serving);
        let (admin_stage, admin_rx) = watch::channel(listener::Stage::Serving);
        // A listener task that ends before the drain is a failure.
        let (ended, mut ended_rx) = tokio::sync::mpsc::unbounded_channel::<&'static str>();
        let public_permits = listener::permits(&self.public.limits);
        let public_router = routes::Routes::public(router(self.state.clone()), self.state.clone());
        let mut event_loops = EventLoops::new();
        let mut public = Vec::with_capacity(loops);
        let first = if loops > 1 {
            let shared = self.public.tcp.into_std()?;
            let balance = listener::Balance::new(loops);
            for index in 1..loops {
                let serving = serve_shared(
                    self.public.name,
                    self.public.limits,
                    shared.try_clone()?,
                    public_permits.clone(),
                    public_router.clone(),
                    self.connections.clone(),
                    public_rx.clone(),
                    listener::Turn {
                        balance: balance.clone(),
                        index,
                    },
                    self.public.refusal.clone(),
                );
                public.push(event_loops.spawn(index, watched("public", ended.clone(), serving))?);
            }
            tokio::spawn(watched(
                "public",
                ended.clone(),
                serve_shared(
                    self.public.name,
                    self.public.limits,
                    shared,
                    public_permits,
                    public_router,
                    self.connections.clone(),
                    public_rx,
                    listener::Turn { balance, index: 0 },
                    self.public.refusal.clone(),
                ),
            ))
        } else {
            tokio::spawn(watched(
                "public",
                ended.clone(),
                listener::serve(
                    self.public,
                    public_permits,
                    public_router,
                    self.connections.clone(),
                    public_rx,
                    None,
                ),
            ))
        };
        public.insert(0, first);
        let admin_permits = listener::permits(&self.admin.limits);
        let mut admin = vec![tokio::spawn(watched(
            "admin",
            ended.clone(),
            listener::serve(
                self.admin,
                admin_permits,
                routes::Routes::router_only(admin_router(self.state.clone())),
                self.connections,
                admin_rx,
                None,
            ),
        ))];
        let state = self.state;
        let watcher = reload::spawn_watch(&state);
        state.inner.ready.store(true, Ordering::SeqCst);
        tracing::info!(
            listen = %public_addr,
            admin = %admin_addr,
            max_connections = public_cap,
            event_loops = loops,
            cpus = cpus.count,
            cpus_from = %cpus.source,
            source = %state.live().config.source,
            "releasegate serving"
        );
        tokio::select! {
            () = shutdown => {}
            Some(name) = ended_rx.recv() => {
                return Err(std::io::Error::other(format!("the {name} listener stopped")));
            }
        }
        if let Some(watcher) = watcher {
            watcher.abort();
        }
        state.inner.ready.store(false, Ordering::SeqCst);
        tracing::info!(
            drain_delay_ms = server.drain_delay().as_millis() as u64,
            grace_ms = server.shutdown_grace().as_millis() as u64,
            "draining: /readyz answers 503"
        );
        tokio::time::sleep(server.drain_delay()).await;
        drain(
            &public_stage,
            &mut public,
            server.shutdown_grace(),
            "public",
        )
        .await;
        drain(&admin_stage, &mut admin, ADMIN_DRAIN, "admin").await;
        if state.inner.decisions.get().is_some() {
            let flushing = state.clone();
            let flushed = tokio::task::spawn_blocking(move || {
                flushing
                    .inner
                    .decisions
                    .get()
                    .is_none_or(|log| log.flush(ADMIN_DRAIN))
            })
            .await;
            if !matches!(flushed, Ok(true)) {
                tracing::warn!("the decision log did not flush in time");
            }
        }
        if state.inner.captures.get().is_some_and(|c| !c.is_empty()) {
            let flushing = state.clone();
            let flushed = tokio::task::spawn_blocking(move || {
                flushing
                    .inner
                    .captures
                    .get()
                    .is_none_or(|captures| captures.values().all(|c| c.flush(ADMIN_DRAIN)))
            })
            .await;
            if !matches!(flushed, Ok(true)) {
                tracing::warn!("a capture file did not flush in time");
            }
        }
        if state.inner.otel.get().is_some() {
            // The last spans, after every request has ended (blocking: off the event loop).
            let exporting = state.clone();
            let _ = tokio::task::spawn_blocking(move || {
                if let Some(exporter) = exporting.inner.otel.get() {
                    exporter.shutdown();
                }
            })
            .await;
        }
        drop(event_loops);
        tracing::info!("drained; stopped");
        Ok(())
    }
}

/// The public listener's answer to a request head hyper refuses before any routing
/// (`listener::Refusal`): the proxy's JSON error with a fresh request id in both request
/// id headers, like every other response of the public listener, and `connection: close`.
fn head_refusal(state: AppState) -> listener::Refusal {
    Arc::new(move |status| {
        let error = Error::HeadRefused(status);
        let id = state.next_request_id();
        tracing::warn!(request_id = %id, status, error_type = error.error_type(), "request head refused");
        let body = serde_json::to_vec(&releasegate_core::release::error_body(
            error.error_type(),
            &error.to_string(),
        ))
        .ok()?;
        let reason = axum::http::StatusCode::from_u16(status)
            .ok()?
            .canonical_reason()
            .unwrap_or("Error");
        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
        let mut bytes = format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{REQUEST_ID_HEADER}: {id}\r\n{SDK_REQUEST_ID_HEADER}: {id}\r\ndate: {date}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        bytes.extend_from_slice(&body);
        Some(bytes)
    })
}

fn sink_name(sink: &releasegate_core::config::DecisionSink) -> String {
    match sink {
        releasegate_core::config::DecisionSink::Stdout => "stdout".to_string(),
        releasegate_core::config::DecisionSink::File(path) => path.display().to_string(),
    }
}

/// Serves a listener from a socket shared with other event loops, registered
/// with the runtime this runs on, taking its `turn` among them.
#[allow(clippy::too_many_arguments)]
async fn serve_shared(
    name: &'static str,
    limits: listener::Limits,
    socket: std::net::TcpListener,
    permits: Arc<tokio::sync::Semaphore>,
    routes: routes::Routes,
    metrics: listener::ConnectionMetrics,
    stage: watch::Receiver<listener::Stage>,
    turn: listener::Turn,
    refusal: Option<listener::Refusal>,
) {
    match TcpListener::from_std(socket) {
        Ok(tcp) => {
            let listener = listener::Listener {
                name,
                tcp,
                limits,
                refusal,
            };
            listener::serve(listener, permits, routes, metrics, stage, Some(turn)).await;
        }
        Err(error) => tracing::error!(%error, "an event loop cannot register the listener"),
    }
}

/// Runs a listener task and reports its end on `ended`.
async fn watched(
    name: &'static str,
    ended: tokio::sync::mpsc::UnboundedSender<&'static str>,
    task: impl Future<Output = ()>,
) {
    task.await;
    let _ = ended.send(name);
}

/// The event-loop threads beyond the calling one; dropping this stops them
/// (their runtimes drop whatever is left).
#[derive(Debug)]
struct EventLoops {
    stop: watch::Sender<bool>,
}

impl EventLoops {
    fn new() -> EventLoops {
        EventLoops {
            stop: watch::channel(false).0,
        }
    }

    /// Starts event loop `index` on a thread of its own and runs `task` on it.
    /// The runtime is built, run and dropped on that thread (a runtime must
    /// not be dropped inside another one's tasks).
    fn spawn(
        &mut self,
        index: usize,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        let (started, handle) = std::sync::mpsc::sync_channel(1);
        let mut stop = self.stop.subscribe();
        std::thread::Builder::new()
            .name(format!("rg-loop-{index}"))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = started.send(Err(error));
                        return;
                    }
                };
                crate::upstream::set_event_loop(index);
                let _ = started.send(Ok(runtime.spawn(task)));
                runtime.block_on(async move {
                    let _ = stop.wait_for(|stop| *stop).await;
                });
                runtime.shutdown_timeout(Duration::from_secs(1));
            })?;
        // Start-up only: the thread answers as soon as its runtime exists.
        handle
            .recv()
            .map_err(|_| std::io::Error::other("an event loop did not start"))?
    }
}

impl Drop for EventLoops {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Stops a listener's accepts and waits up to `grace` for its connections
/// (every event loop's), then drops the rest.
async fn drain(
    stage: &watch::Sender<listener::Stage>,
    tasks: &mut [tokio::task::JoinHandle<()>],
    grace: Duration,
    name: &'static str,
) {
    let _ = stage.send(listener::Stage::Draining);
    if tokio::time::timeout(grace, all_finished(tasks))
        .await
        .is_err()
    {
        tracing::warn!(
            listener = name,
            "shutdown grace elapsed with connections still open; closing them"
        );
        let _ = stage.send(listener::Stage::Closing);
        if tokio::time::timeout(Duration::from_secs(1), all_finished(tasks))
            .await
            .is_err()
        {
            for task in tasks.iter() {
                task.abort();
            }
        }
    }
}

/// Waits for every task (a task already awaited to its end is not polled again).
async fn all_finished(tasks: &mut [tokio::task::JoinHandle<()>]) {
    for task in tasks.iter_mut() {
        if !task.is_finished() {
            let _ = (&mut *task).await;
        }
    }
}

// === impl AppState ===

impl AppState {
    /// Everything `Application::build` does except binding the listeners: metrics, the HTTP
    /// client and providers, the key table. `check-config` runs it too, so a configuration it
    /// accepts fails under `serve` only if a port cannot be bound.
    pub fn prepare(config: Config) -> Result<AppState, StartError> {
        if let Some(refusal) = config.certification.refusal() {
            return Err(StartError::Uncertified(refusal));
        }
        let metrics = Metrics::new()?;
        metrics.describe(&config);
        let server = config.server.clone();
        if let Some(releasegate_core::config::DecisionSink::File(path)) =
            config.decision_log.as_ref().map(|log| log.sink())
        {
            let parent = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            if !parent.is_dir() {
                return Err(StartError::DecisionLog {
                    path: path.display().to_string(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "its directory does not exist",
                    ),
                });
            }
        }
        for (contract, capture) in &config.captures {
            let parent = capture
                .path()
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            if !parent.is_dir() {
                return Err(StartError::Capture {
                    contract: contract.clone(),
                    path: capture.path().display().to_string(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "its directory does not exist",
                    ),
                });
            }
        }
        let live = Live::new(config, &metrics, None)?;
        let request_ids = middleware::RequestIds::from_os().map_err(StartError::Random)?;
        Ok(AppState {
            inner: Arc::new(Inner {
                live: ArcSwap::from_pointee(live),
                server,
                metrics,
                ready: AtomicBool::new(false),
                request_ids,
                reloading: std::sync::Mutex::new(()),
                decisions: std::sync::OnceLock::new(),
                captures: std::sync::OnceLock::new(),
                otel: std::sync::OnceLock::new(),
            }),
        })
    }

    /// The span exporter, when `[tracing]` names one.
    pub(crate) fn otel(&self) -> Option<&crate::otel::Exporter> {
        self.inner.otel.get()
    }

    /// The metrics handles.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The configuration generation in force now. A request takes it once (one reference
    /// count, no lock) and keeps it to its end, whatever reloads happen meanwhile.
    fn live(&self) -> Arc<Live> {
        self.inner.live.load_full()
    }

    /// The SHA-256 of the configuration text in force (`releasegate_config_info`).
    pub fn config_sha256(&self) -> String {
        self.inner.live.load().config.origin.sha256.clone()
    }

    /// The live capture of contract `name`, when it declares one and the server started it.
    fn capture(&self, name: &str) -> Option<&crate::capture::Capture> {
        self.inner.captures.get()?.get(name)
    }

    /// A fresh request id (`middleware::RequestIds`).
    fn next_request_id(&self) -> middleware::RequestId {
        self.inner.request_ids.next()
    }
}

/// The public router (System One endpoints), also under `/contracts/{name}/`
/// for clients that cannot send `X-Release-Contract`. The listeners serve
/// `POST /v1/systemone` past the router's dispatch, with the same layers and
/// handler (`routes::Routes::public`).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/systemone", post(handlers::systemone))
        .route("/v1/models", get(handlers::models))
        .route(
            "/contracts/{contract}/v1/systemone",
            post(handlers::systemone_for),
        )
        .route("/contracts/{contract}/v1/models", get(handlers::models_for))
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .fallback(handlers::not_found)
        .layer(middleware::RequestIdLayer(state.clone()))
        .layer(
            tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer::new(
                routes::sensitive_headers(),
            ),
        )
        .with_state(state)
}

/// The admin router (metrics and health).
pub fn admin_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(handlers::metrics))
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .with_state(state)
}
