//! Starting and stopping the application: `Application::build` starts the
//! outputs (decision log, captures, span exporter) and binds both listeners;
//! `Application::run_until_stopped` serves them on the event loops and drains.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use tokio::task::JoinHandle;

use super::event_loops::{Ended, EventLoops, drain, serve_shared, watched};
use super::{
    AppState, Error, Limits, REQUEST_ID_HEADER, SDK_REQUEST_ID_HEADER, StartError, admin_router,
    listener, reload, router, routes,
};
use releasegate_core::config::{Config, Provider, Server};

/// How long the admin listener's own connections may take to finish once
/// the public listener has drained.
pub(super) const ADMIN_DRAIN: Duration = Duration::from_secs(1);

/// A bound, ready-to-run application.
#[derive(Debug)]
pub struct Application {
    public: listener::Listener,
    admin: listener::Listener,
    connections: listener::ConnectionMetrics,
    state: AppState,
}

// === impl Application ===

impl Application {
    /// Builds every dependency once (`AppState::prepare`), then binds both listeners.
    pub async fn build(config: Config) -> Result<Application, StartError> {
        let (listen, admin_listen) = (config.server().listen(), config.server().admin_listen());
        // Never a configuration loaded without its codebooks (its WCPQ questions would release
        // under `none`): only `check-config --no-codebooks` prepares one.
        if !config.unloaded_codebooks().is_empty() || config.certification().unchecked() {
            return Err(StartError::CodebooksNotLoaded);
        }
        let state = AppState::prepare(config)?;
        // The latency clock is calibrated before the first request, not during it.
        releasegate_core::timing::warm();
        let public = bind(listen).await?;
        let admin = bind(admin_listen).await?;
        // The bound addresses (port 0 picks one): how a supervisor finds the proxy.
        if let (Ok(public), Ok(admin)) = (public.local_addr(), admin.local_addr()) {
            tracing::info!(%public, %admin, "listeners bound");
        }
        let connections = listener::ConnectionMetrics::register(state.inner.metrics.registry())?;
        let live = state.live();
        start_decision_log(&state, &live.config)?;
        start_captures(&state, &live.config)?;
        start_exporter(&state, &live.config)?;
        let public = public_listener(&state, &live.config, public);
        let admin = admin_listener(&state, admin);
        Ok(Application {
            public,
            admin,
            connections,
            state,
        })
    }

    /// The bound public port.
    #[cfg(any(test, feature = "test-support"))]
    pub fn port(&self) -> u16 {
        self.public.tcp.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// The public listener's limits.
    #[cfg(feature = "test-support")]
    pub fn limits(&self) -> Limits {
        self.public.limits
    }

    /// The bound admin port.
    #[cfg(feature = "test-support")]
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
        let state = self.state;
        let connections = self.connections;
        let (event_loops, mut public) =
            spawn_public(self.public, &state, &connections, public_rx, loops, &ended)?;
        let mut admin = vec![spawn_admin(
            self.admin,
            &state,
            connections,
            admin_rx,
            &ended,
        )];
        let watcher = reload::spawn_watch(&state);
        state.inner.ready.store(true, Ordering::SeqCst);
        tracing::info!(
            listen = %public_addr,
            admin = %admin_addr,
            max_connections = public_cap,
            event_loops = loops,
            cpus = cpus.count,
            cpus_from = %cpus.source,
            request_bytes_budget = state.inner.budget.limit(),
            memory_limit_from = %crate::memory::limit(),
            source = %state.live().config.source(),
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
        flush_decisions(&state).await;
        flush_captures(&state).await;
        shutdown_exporter(&state).await;
        drop(event_loops);
        tracing::info!("drained; stopped");
        Ok(())
    }
}

/// Binds a listener's address.
async fn bind(addr: std::net::SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })
}

/// Starts the decision log, when the configuration has one.
fn start_decision_log(state: &AppState, config: &Config) -> Result<(), StartError> {
    if let Some(settings) = &config.decision_log() {
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
    Ok(())
}

/// Starts the live capture of every contract that declares one.
fn start_captures(state: &AppState, config: &Config) -> Result<(), StartError> {
    let mut captures = std::collections::BTreeMap::new();
    for (contract, settings) in config.captures() {
        let capture = crate::capture::Capture::start(contract, settings, &state.inner.metrics)
            .map_err(|source| StartError::Capture {
                contract: contract.clone(),
                path: settings.path().display().to_string(),
                source,
            })?;
        captures.insert(contract.clone(), capture);
    }
    let _ = state.inner.captures.set(captures);
    Ok(())
}

/// Starts the span exporter, when `[tracing]` names one.
fn start_exporter(state: &AppState, config: &Config) -> Result<(), StartError> {
    if let Some(tracing) = &config.tracing() {
        let exporter = crate::otel::Exporter::start(tracing).map_err(StartError::Tracing)?;
        tracing::info!(
            endpoint = tracing.otlp_endpoint(),
            "exporting spans over OTLP/HTTP"
        );
        let _ = state.inner.otel.set(exporter);
    }
    Ok(())
}

/// The public listener on `tcp`: its connection cap fitted to the file descriptor limit
/// (beside the admin cap and the providers' upstream connections), and the head refusal.
fn public_listener(state: &AppState, config: &Config, tcp: TcpListener) -> listener::Listener {
    let server = &state.inner.server;
    listener::Listener {
        name: "public",
        tcp,
        limits: Limits {
            max_connections: listener::fit_to_fd_limit(
                server.max_connections(),
                server.admin_max_connections(),
                upstream_fds(config, server),
            ),
            ..state.inner.limits
        },
        refusal: Some(head_refusal(state.clone())),
    }
}

/// The admin listener on `tcp`, with its own connection cap.
fn admin_listener(state: &AppState, tcp: TcpListener) -> listener::Listener {
    listener::Listener {
        name: "admin",
        tcp,
        limits: Limits {
            max_connections: state.inner.server.admin_max_connections(),
            ..state.inner.limits
        },
        refusal: None,
    }
}

/// The file descriptors the providers' upstream connections may take, over every event loop.
fn upstream_fds(config: &Config, server: &Server) -> usize {
    config
        .providers()
        .values()
        .map(|provider| match provider {
            Provider::SystemOne(remote) => listener::upstream_fds(
                remote.max_concurrency(),
                server.event_loops(crate::cpus::available().count),
            ),
            Provider::Simulated => 0,
        })
        .fold(0usize, usize::saturating_add)
}

/// Starts the public listener's tasks: on the calling runtime alone with one event loop,
/// else on `loops` event loops sharing its socket (`spawn_shared_loops`).
fn spawn_public(
    public: listener::Listener,
    state: &AppState,
    connections: &listener::ConnectionMetrics,
    stage: watch::Receiver<listener::Stage>,
    loops: usize,
    ended: &Ended,
) -> std::io::Result<(EventLoops, Vec<JoinHandle<()>>)> {
    let mut event_loops = EventLoops::new();
    let tasks = if loops > 1 {
        spawn_shared_loops(
            public,
            state,
            connections,
            stage,
            loops,
            ended,
            &mut event_loops,
        )?
    } else {
        let permits = listener::permits(&public.limits);
        let routes = routes::Routes::public(router(state.clone()), state.clone());
        vec![tokio::spawn(watched(
            "public",
            ended.clone(),
            listener::serve(public, permits, routes, connections.clone(), stage, None),
        ))]
    };
    Ok((event_loops, tasks))
}

/// Serves the public listener's socket from `loops` event loops: loop 0 on the calling
/// runtime (its task first in the list), the others on threads of `event_loops`.
fn spawn_shared_loops(
    public: listener::Listener,
    state: &AppState,
    connections: &listener::ConnectionMetrics,
    stage: watch::Receiver<listener::Stage>,
    loops: usize,
    ended: &Ended,
    event_loops: &mut EventLoops,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    let permits = listener::permits(&public.limits);
    let routes = routes::Routes::public(router(state.clone()), state.clone());
    let mut tasks = Vec::with_capacity(loops);
    let shared = public.tcp.into_std()?;
    let loads = listener::LoopLoads::new(loops);
    for index in 1..loops {
        let serving = serve_shared(
            public.name,
            public.limits,
            shared.try_clone()?,
            permits.clone(),
            routes.clone(),
            connections.clone(),
            stage.clone(),
            listener::LoopAccept {
                loads: loads.clone(),
                index,
            },
            public.refusal.clone(),
        );
        tasks.push(event_loops.spawn(index, watched("public", ended.clone(), serving))?);
    }
    let first = tokio::spawn(watched(
        "public",
        ended.clone(),
        serve_shared(
            public.name,
            public.limits,
            shared,
            permits,
            routes,
            connections.clone(),
            stage,
            listener::LoopAccept { loads, index: 0 },
            public.refusal.clone(),
        ),
    ));
    tasks.insert(0, first);
    Ok(tasks)
}

/// Starts the admin listener's task on the calling runtime.
fn spawn_admin(
    admin: listener::Listener,
    state: &AppState,
    connections: listener::ConnectionMetrics,
    stage: watch::Receiver<listener::Stage>,
    ended: &Ended,
) -> JoinHandle<()> {
    let permits = listener::permits(&admin.limits);
    tokio::spawn(watched(
        "admin",
        ended.clone(),
        listener::serve(
            admin,
            permits,
            routes::Routes::router_only(admin_router(state.clone())),
            connections,
            stage,
            None,
        ),
    ))
}

/// Waits, off the event loop and up to `ADMIN_DRAIN`, for the decision log to write what
/// it holds.
async fn flush_decisions(state: &AppState) {
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
}

/// Waits, off the event loop and up to `ADMIN_DRAIN`, for every capture file to be written.
async fn flush_captures(state: &AppState) {
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
}

/// Exports the last spans, after every request has ended (blocking: off the event loop).
async fn shutdown_exporter(state: &AppState) {
    if state.inner.otel.get().is_some() {
        let exporting = state.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(exporter) = exporting.inner.otel.get() {
                exporter.shutdown();
            }
        })
        .await;
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
