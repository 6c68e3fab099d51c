//! The HTTP application: a public listener for System One and an admin
//! listener for metrics and health. Handlers authenticate, check the request
//! against its contract, call the provider and release the answer through
//! `release` (the same pure path the offline replay uses).

mod application;
mod body;
pub(crate) mod budget;
mod error;
mod event_loops;
mod handlers;
pub(crate) mod limits;
pub(crate) mod listener;
mod middleware;
pub(crate) mod multipart;
mod reload;
mod routes;
mod trace;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use arc_swap::ArcSwap;
use axum::Router;
use axum::routing::{get, post};

use crate::auth::Keys;
use crate::metrics::Metrics;
use crate::upstream::Upstreams;
use releasegate_core::config::{Config, Server};

pub use application::Application;
pub(crate) use budget::Shed;
pub use error::Error;
pub use limits::{Limits, MAX_HEAD_BUFFER_BYTES, MAX_HEADER_BYTES, MAX_HEADER_FIELDS};
pub use middleware::SDK_REQUEST_ID_HEADER;
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
    /// The request limits of `[server]` and the fixed ones (each listener's connection
    /// cap is its own: `Application::build`).
    limits: Limits,
    /// The budget on the bytes all requests in flight hold (`budget`).
    budget: budget::Budget,
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
    /// The exact cache of native answers, when a contract configures one.
    cache: Option<crate::cache::AnswerCache>,
    limits: crate::ratelimit::Limits,
    /// Each recipient's requests in flight against its `max_in_flight`.
    in_flight: crate::ratelimit::InFlight,
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
        let cache = crate::cache::AnswerCache::new(&config, metrics);
        let keys = Keys::new(config.recipients());
        let loops = config.server().event_loops(crate::cpus::available().count);
        let limits = crate::ratelimit::Limits::new(
            config.recipients(),
            config
                .rate_limit_store()
                .map(|store| (store, metrics, loops)),
            previous.map(|live| &live.limits),
        );
        let in_flight = crate::ratelimit::InFlight::new(
            config.recipients(),
            previous.map(|live| &live.in_flight),
        );
        let answer_series = metrics.answer_series(&config);
        let request_series = metrics.request_series(&config);
        Ok(Live {
            config,
            keys,
            upstreams,
            cache,
            limits,
            in_flight,
            answer_series,
            request_series,
        })
    }
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
    /// The configuration holds a key of the embedded demo and its public listener is not on
    /// loopback (`demo::exposed`).
    #[error("{0}")]
    DemoKeys(String),
    /// The configuration was loaded without its codebooks: it can be checked, never served.
    #[error("a configuration loaded without its codebooks cannot be served")]
    CodebooksNotLoaded,
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

// === impl AppState ===

impl AppState {
    /// Everything `Application::build` does except binding the listeners: metrics, the HTTP
    /// client and providers, the key table. `check-config` runs it too, so a configuration it
    /// accepts fails under `serve` only if a port cannot be bound.
    pub fn prepare(config: Config) -> Result<AppState, StartError> {
        if let Some(refusal) = config.certification().refusal() {
            return Err(StartError::Uncertified(refusal));
        }
        if let Some(refusal) = crate::demo::exposed(&config) {
            return Err(StartError::DemoKeys(refusal));
        }
        let metrics = Metrics::new()?;
        metrics.describe(&config);
        let server = config.server().clone();
        if let Some(releasegate_core::config::DecisionSink::File(path)) =
            config.decision_log().map(|log| log.sink())
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
        for (contract, capture) in config.captures() {
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
        let limits = Limits::new(&server, server.max_connections());
        let (budget_bytes, _) = crate::memory::budget(&server);
        metrics
            .request_bytes_limit
            .set(i64::try_from(budget_bytes).unwrap_or(i64::MAX));
        let budget = budget::Budget::new(
            budget_bytes,
            server.decoded_bytes_queue_timeout(),
            metrics.request_bytes_in_use.clone(),
            metrics.requests_shed.clone(),
        );
        let live = Live::new(config, &metrics, None)?;
        let request_ids = middleware::RequestIds::from_os().map_err(StartError::Random)?;
        Ok(AppState {
            inner: Arc::new(Inner {
                live: ArcSwap::from_pointee(live),
                server,
                limits,
                budget,
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
    #[cfg(feature = "test-support")]
    pub fn config_sha256(&self) -> String {
        self.inner.live.load().config.origin().sha256.clone()
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
        .route("/v1/questions", get(handlers::questions))
        .route(
            "/contracts/{contract}/v1/questions",
            get(handlers::questions_for),
        )
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
