//! The HTTP application: a public listener for System One and an admin
//! listener for metrics and health. Handlers authenticate, check the request
//! against its contract, call the provider and release the answer through
//! `release` (the same pure path the offline replay uses).

mod body;
mod error;
mod handlers;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;

use crate::auth::Keys;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::upstream::Upstreams;

pub use error::Error;

/// Header carrying the proxy's own request id on every response.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Shared state of both listeners.
#[derive(Clone, Debug)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Config,
    keys: Keys,
    upstreams: Upstreams,
    metrics: Metrics,
    ready: AtomicBool,
    request_prefix: u64,
    request_counter: AtomicU64,
}

/// A bound, ready-to-run application.
#[derive(Debug)]
pub struct Application {
    public: TcpListener,
    admin: TcpListener,
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
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client")]
    Client(#[from] reqwest::Error),
    /// Metrics could not be registered.
    #[error("cannot register metrics")]
    Metrics(#[from] prometheus::Error),
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
        let (listen, admin_listen) = (config.server.listen, config.server.admin_listen);
        let state = AppState::prepare(config)?;
        let public = bind(listen).await?;
        let admin = bind(admin_listen).await?;
        Ok(Application {
            public,
            admin,
            state,
        })
    }

    /// The bound public port.
    pub fn port(&self) -> u16 {
        self.public.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// The bound admin port.
    pub fn admin_port(&self) -> u16 {
        self.admin.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// The shared state (metrics, config).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` resolves, then drains for at most the configured grace.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let grace = self.state.inner.config.server.shutdown_grace;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stopped| *stopped).await;
        };
        let public = axum::serve(self.public, router(self.state.clone()))
            .with_graceful_shutdown(wait(stop_rx.clone()));
        let admin = axum::serve(self.admin, admin_router(self.state.clone()))
            .with_graceful_shutdown(wait(stop_rx));
        let state = self.state.clone();
        state.inner.ready.store(true, Ordering::SeqCst);
        tracing::info!(
            listen = %state.inner.config.server.listen,
            admin = %state.inner.config.server.admin_listen,
            source = %state.inner.config.source,
            "releasegate serving"
        );
        let servers =
            async move { tokio::try_join!(async { public.await }, async { admin.await }) };
        tokio::pin!(servers);
        tokio::select! {
            result = &mut servers => return result.map(|_| ()),
            () = shutdown => {}
        }
        state.inner.ready.store(false, Ordering::SeqCst);
        let _ = stop_tx.send(true);
        // Idle keep-alive connections can hold a graceful shutdown open forever: bound it.
        match tokio::time::timeout(grace, &mut servers).await {
            Ok(result) => result.map(|_| ()),
            Err(_) => {
                tracing::warn!("shutdown grace elapsed with connections still open");
                Ok(())
            }
        }
    }
}

// === impl AppState ===

impl AppState {
    /// Everything `Application::build` does except binding the listeners: metrics, the HTTP
    /// client and providers, the key table. `check-config` runs it too, so a configuration it
    /// accepts fails under `serve` only if a port cannot be bound.
    pub fn prepare(config: Config) -> Result<AppState, StartError> {
        let metrics = Metrics::new()?;
        metrics.describe(&config);
        let upstreams = Upstreams::new(&config, metrics.clone())?;
        let keys = Keys::new(&config.recipients);
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ u64::from(std::process::id()).rotate_left(32);
        Ok(AppState {
            inner: Arc::new(Inner {
                config,
                keys,
                upstreams,
                metrics,
                ready: AtomicBool::new(false),
                request_prefix: crate::rng::Rng::new(seed).next_u64(),
                request_counter: AtomicU64::new(0),
            }),
        })
    }

    /// The metrics handles.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// A fresh request id (process-random prefix and a counter).
    fn next_request_id(&self) -> String {
        let n = self.inner.request_counter.fetch_add(1, Ordering::Relaxed);
        format!("rg-{:016x}-{n:x}", self.inner.request_prefix)
    }
}

/// The public router (System One endpoints).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/systemone", post(handlers::systemone))
        .route("/v1/models", get(handlers::models))
        .fallback(handlers::not_found)
        .layer(
            tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer::new([
                axum::http::header::AUTHORIZATION,
                axum::http::HeaderName::from_static(crate::auth::API_KEY_HEADER),
            ]),
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
