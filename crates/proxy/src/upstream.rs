//! Providers: a remote System One endpoint, or the in-process simulator.
//! Upstream bodies never reach clients; this module only hands back parsed JSON
//! or a status.
//!
//! Each event loop of the server has its own connections, so a request goes out
//! over connections driven by its own thread: a connection's task runs on the
//! runtime that opened it, and connections shared by several loops would hand
//! requests across threads. An `http://` provider is reached over the loop's own
//! HTTP/1.1 pool (`pool`); an `https://` provider over hyper-util's pooled client
//! (TLS by rustls with the platform's certificate verifier, HTTP/2 by ALPN).
//!
//! Neither is reqwest (which wraps hyper-util's client): under load reqwest's
//! layers (a URL parse of every response, per-request clones of its client and
//! connector, its request and response wrappers) cost 3 to 4 µs per request
//! (`docs/benchmarks.md`). What reqwest did for the proxy is done here: no
//! redirects followed, connect timeout, idle pool, `TCP_NODELAY`, a default
//! `user-agent`, the body cap. Proxy environment variables (`HTTPS_PROXY`, ...)
//! are not read: providers are reached directly.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use axum::http::header::{
    ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, USER_AGENT,
};
use axum::http::{Method, Request, Uri};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use prometheus::Histogram;
use secrecy::ExposeSecret;
use serde_json::Value;
use tokio::sync::Semaphore;

mod circuit;
mod failover;
pub(crate) mod pool;
mod segments;

use crate::metrics::Metrics;
use releasegate_core::config::{Config, Provider};
use releasegate_core::contract::ForwardHeader;
use releasegate_core::wire::provider::{ProviderError, provider_error};

/// Most bytes of a provider's error body the proxy reads to learn its kind
/// (`wire::provider`); a longer body is not read further and counts as no kind.
pub(crate) const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// A System One request on its way upstream.
#[derive(Clone, Copy)]
pub(crate) struct Post<'r> {
    /// The body sent, as segments sent one after the other: the serialization of `sent`
    /// alone, or a multipart body holding it and the request's images (the proxy's framing
    /// and the images as slices of the request's parts, `server::multipart::build`).
    pub(crate) body: &'r [Bytes],
    /// The body's content type (`application/json` or `multipart/form-data; boundary=`).
    pub(crate) content_type: &'r HeaderValue,
    /// The serialization of `sent` (what the simulated provider reads).
    pub(crate) json: &'r Bytes,
    /// The checked request whose upstream body this is (`wire::Asked::upstream`, built
    /// only when a provider's validation errors must be cut to what is in it); `None`
    /// where nothing was checked.
    pub(crate) sent: Option<&'r releasegate_core::wire::Asked>,
    /// The caller's headers (only `FORWARDED_HEADERS` of them go upstream).
    pub(crate) headers: &'r HeaderMap,
    /// The contract's `forward_headers` the caller switched on: sent as `NAME: true`.
    pub(crate) switches: &'r [ForwardHeader],
}

/// Request headers of real clients that are forwarded upstream (never credentials).
/// `traceparent` and `tracestate` are the proxy's own by then: the public router's
/// middleware replaced the caller's with validated ones (`server::trace`).
pub(crate) const FORWARDED_HEADERS: [&str; 6] = [
    "user-agent",
    "x-typesafe-sdk",
    "x-typesafe-runtime",
    "x-typesafe-retry-count",
    "traceparent",
    "tracestate",
];

/// `FORWARDED_HEADERS` as header names (checked at compile time; the array type makes
/// a list that misses one of them fail to compile).
const FORWARDED: [HeaderName; FORWARDED_HEADERS.len()] = [
    HeaderName::from_static(FORWARDED_HEADERS[0]),
    HeaderName::from_static(FORWARDED_HEADERS[1]),
    HeaderName::from_static(FORWARDED_HEADERS[2]),
    HeaderName::from_static(FORWARDED_HEADERS[3]),
    HeaderName::from_static(FORWARDED_HEADERS[4]),
    HeaderName::from_static(FORWARDED_HEADERS[5]),
];

/// The System One endpoint, below a provider's `base_url`.
const SYSTEMONE_PATH: &str = "/v1/systemone";
/// The models endpoint, below a provider's `base_url`.
const MODELS_PATH: &str = "/v1/models";

/// Longest retry delay passed on to clients, in seconds (one day); longer hints are capped.
pub(crate) const MAX_RETRY_AFTER_SECONDS: u64 = 86_400;

/// A transport error with its cause chain (for logs only).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The `user-agent` sent when the caller's is not forwarded.
const USER_AGENT_VALUE: HeaderValue =
    HeaderValue::from_static(concat!("releasegate/", env!("CARGO_PKG_VERSION")));

/// Upstream failures (each maps to one client status).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The provider did not answer in time (504).
    #[error("upstream timed out")]
    Timeout,
    /// The provider could not be reached (502).
    #[error("upstream unreachable")]
    Connect(#[source] BoxError),
    /// The connection failed mid-exchange (502).
    #[error("upstream transport failure")]
    Transport(#[source] BoxError),
    /// The provider's body exceeded the configured cap (502).
    #[error("upstream body too large")]
    TooLarge,
    /// Too many requests already in flight to this provider (503).
    #[error("upstream concurrency limit reached")]
    Saturated,
    /// The in-process simulator refused the request (400).
    #[error("{0}")]
    Rejected(String),
}

/// Every `kind` label of `releasegate_upstream_errors_total`: transport failures, then
/// non-2xx statuses by class (`auth` is 401 and 403: the provider refused the proxy's key).
pub(crate) const ERROR_KINDS: [&str; 12] = [
    "timeout",
    "connect",
    "transport",
    "too_large",
    "saturated",
    "rejected",
    "auth",
    "status_429",
    "status_529",
    "status_4xx",
    "status_5xx",
    "status_other",
];

// === impl Error ===

impl Error {
    /// The `kind` label this failure is counted under.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Timeout => "timeout",
            Error::Connect(_) => "connect",
            Error::Transport(_) => "transport",
            Error::TooLarge => "too_large",
            Error::Saturated => "saturated",
            Error::Rejected(_) => "rejected",
        }
    }
}

/// The `kind` label of a non-2xx upstream status.
pub(crate) fn status_kind(status: u16) -> &'static str {
    match status {
        401 | 403 => "auth",
        429 => "status_429",
        529 => "status_529",
        400..=499 => "status_4xx",
        500..=599 => "status_5xx",
        _ => "status_other",
    }
}

/// One provider's attempt at a request: its outcome, and whether the request may have
/// reached the provider (`false`: it certainly did not: no connection, no slot, or the
/// deadline passed before a byte of it was written).
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) result: Result<Reply, Error>,
    pub(crate) sent: bool,
}

/// A provider's answer.
#[derive(Debug)]
pub(crate) enum Reply {
    /// A 2xx answer with a body (not yet validated; may not even be JSON).
    Success(Bytes),
    /// Any other status; the body is dropped here so it can never leak.
    Status {
        /// The upstream status.
        status: u16,
        /// `retry-after` in whole seconds (see `retry_after`), when sent with 429/529.
        retry_after: Option<HeaderValue>,
        /// `retry-after-ms` in whole milliseconds (see `retry_after_ms`), when sent with 429/529.
        retry_after_ms: Option<HeaderValue>,
        /// What the error body says that a recipient may learn (`wire::provider`).
        problem: Option<ProviderError>,
    },
}

/// Why the providers could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The TLS set-up (the platform's certificate verifier) failed.
    #[error("cannot set up TLS for the providers")]
    Tls(#[source] std::io::Error),
    /// A provider's `base_url` is not a valid URL.
    #[error("providers.{provider}.base_url: `{url}` is not a valid URL ({reason})")]
    BaseUrl {
        /// The provider.
        provider: String,
        /// The URL that failed to parse.
        url: String,
        /// The parser's reason.
        reason: String,
    },
    /// A provider key cannot be sent in an HTTP header.
    #[error(
        "providers.{provider}.api_key_env: the key contains characters not allowed in an HTTP header"
    )]
    ApiKey {
        /// The provider.
        provider: String,
    },
}

thread_local! {
    /// The event loop this thread runs (0 unless [`set_event_loop`] says otherwise).
    static EVENT_LOOP: Cell<usize> = const { Cell::new(0) };
}

/// Marks the calling thread as the server's event loop `index`: its requests
/// use that loop's HTTP client.
pub(crate) fn set_event_loop(index: usize) {
    EVENT_LOOP.with(|current| current.set(index));
}

/// The event loop the calling thread runs (0: the first loop and the admin listener).
pub(crate) fn event_loop() -> usize {
    EVENT_LOOP.with(Cell::get)
}

/// All configured providers.
///
/// Each recipient has connections of its own to every provider (a pool, or an HTTP
/// client, per recipient and event loop): whatever a provider sends on a connection,
/// asked for or not, can only reach the recipient whose requests that connection carries.
/// Calls with no recipient (`collect`) have theirs. Providers are built with each
/// configuration generation (`server::Live`), so every recipient that can authenticate
/// has its own.
#[derive(Clone, Debug)]
pub(crate) struct Upstreams {
    providers: Arc<BTreeMap<String, Configured>>,
    /// The connection slot of each recipient (slot 0: no recipient).
    slots: Arc<BTreeMap<String, usize>>,
    /// HTTP clients for `https://` providers, per slot and event loop.
    clients: Arc<Grid<Client>>,
    /// The circuit breakers of the providers that configure one.
    breakers: Arc<BTreeMap<String, Arc<circuit::Breaker>>>,
    max_body_bytes: usize,
    metrics: Metrics,
}

/// One configured provider and its latency series.
#[derive(Debug)]
struct Configured {
    upstream: Upstream,
    /// `releasegate_upstream_latency_seconds{provider}`, resolved at the provider's first
    /// call (so the series appears then, as it would by label) and observed directly after.
    latency: OnceLock<Histogram>,
}

/// One value per connection slot and event loop (at least one of each).
#[derive(Debug)]
struct Grid<T> {
    /// `cells[slot * loops + event loop]`.
    cells: Box<[T]>,
    loops: usize,
}

impl<T> Grid<T> {
    fn new(
        slots: usize,
        loops: usize,
        make: impl FnMut() -> Result<T, SetupError>,
    ) -> Result<Grid<T>, SetupError> {
        let (slots, loops) = (slots.max(1), loops.max(1));
        Ok(Grid {
            cells: std::iter::repeat_with(make)
                .take(slots * loops)
                .collect::<Result<_, _>>()?,
            loops,
        })
    }

    /// The value of `slot` on the calling thread's event loop (the first loop's for a
    /// thread that is none of them).
    fn get(&self, slot: usize) -> &T {
        let index = EVENT_LOOP.with(Cell::get);
        let index = if index < self.loops { index } else { 0 };
        self.cells
            .get(slot * self.loops + index)
            .unwrap_or(&self.cells[0])
    }
}

/// One recipient's HTTP client on one event loop.
type Client = HttpClient<hyper_rustls::HttpsConnector<HttpConnector>, segments::Segments>;

#[derive(Debug)]
enum Upstream {
    Remote(Box<Remote>),
    Simulated,
}

#[derive(Debug)]
struct Remote {
    /// `{base_url}/v1/systemone`, parsed once: a URL is not re-parsed per call.
    systemone_url: Uri,
    /// `{base_url}/v1/models`.
    models_url: Uri,
    /// `Bearer {key}`, marked sensitive (never printed by `Debug`).
    authorization: Option<HeaderValue>,
    timeout: Duration,
    queue_timeout: Duration,
    permits: Semaphore,
    /// For an `http://` provider: its own connections (`pool`).
    plain: Option<Plain>,
}

/// How an `http://` provider is reached: HTTP/1.1 over the pool of the calling recipient
/// on its event loop.
#[derive(Debug)]
struct Plain {
    /// A pool per connection slot (`Upstreams`) and event loop.
    pools: Grid<Arc<pool::Pool>>,
    /// The `Host` header: the base URL's authority.
    host: HeaderValue,
    /// The origin-form targets (`{base path}/v1/systemone`, `.../v1/models`).
    systemone: Uri,
    models: Uri,
}

impl Plain {
    /// The connections of a provider with these URLs, `slots` by `event_loops` pools, or
    /// `None` for `https://`.
    fn new(systemone: &Uri, models: &Uri, slots: usize, event_loops: usize) -> Option<Plain> {
        if systemone.scheme_str() != Some("http") {
            return None;
        }
        let authority = systemone.authority()?;
        let address = format!(
            "{}:{}",
            authority.host(),
            authority.port_u16().unwrap_or(80)
        );
        let origin = |url: &Uri| -> Option<Uri> { url.path_and_query()?.as_str().parse().ok() };
        Some(Plain {
            pools: Grid::new(slots, event_loops, || Ok(pool::Pool::new(address.clone()))).ok()?,
            host: HeaderValue::from_str(authority.as_str()).ok()?,
            systemone: origin(systemone)?,
            models: origin(models)?,
        })
    }
}

// === impl Upstreams ===

impl Upstreams {
    /// Builds the HTTP clients (one per event loop) and the providers.
    pub(crate) fn new(config: &Config, metrics: Metrics) -> Result<Upstreams, SetupError> {
        // A second install (tests build many apps per process) is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let tls = {
            use hyper_rustls::ConfigBuilderExt;
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .and_then(|builder| builder.try_with_platform_verifier())
            .map_err(|error| SetupError::Tls(std::io::Error::other(error)))?
            .with_no_client_auth()
        };
        let client = || -> Result<Client, SetupError> {
            let mut http = HttpConnector::new();
            http.enforce_http(false);
            http.set_nodelay(true);
            http.set_connect_timeout(Some(Duration::from_secs(5)));
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls.clone())
                .https_or_http()
                .enable_http1()
                .enable_http2()
                .wrap_connector(http);
            Ok(HttpClient::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(64)
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .build(https))
        };
        let event_loops = config.server().event_loops(crate::cpus::available().count);
        let slots: BTreeMap<String, usize> = config
            .recipients()
            .iter()
            .enumerate()
            .map(|(index, recipient)| (recipient.name.clone(), index + 1))
            .collect();
        let clients = Grid::new(slots.len() + 1, event_loops, client)?;
        let mut providers = BTreeMap::new();
        let mut breakers = BTreeMap::new();
        for (name, provider) in config.providers() {
            if let Provider::SystemOne(remote) = provider
                && let Some(spec) = remote.circuit()
            {
                let gauge = metrics.routing.circuit_state.with_label_values(&[name]);
                breakers.insert(name.clone(), circuit::Breaker::new(spec, gauge));
            }
            let upstream = match provider {
                Provider::Simulated => Upstream::Simulated,
                Provider::SystemOne(remote) => {
                    let url = |path: &str| {
                        let url = format!("{}{path}", remote.base_url());
                        url.parse::<Uri>().map_err(|error| SetupError::BaseUrl {
                            provider: name.clone(),
                            url: remote.base_url().to_string(),
                            reason: error.to_string(),
                        })
                    };
                    let authorization = match &remote.api_key() {
                        None => None,
                        Some(key) => {
                            let bearer = format!("Bearer {}", key.expose_secret());
                            let mut value =
                                HeaderValue::from_str(&bearer).map_err(|_| SetupError::ApiKey {
                                    provider: name.clone(),
                                })?;
                            value.set_sensitive(true);
                            Some(value)
                        }
                    };
                    let systemone_url = url(SYSTEMONE_PATH)?;
                    let models_url = url(MODELS_PATH)?;
                    let plain =
                        Plain::new(&systemone_url, &models_url, slots.len() + 1, event_loops);
                    Upstream::Remote(Box::new(Remote {
                        systemone_url,
                        models_url,
                        plain,
                        authorization,
                        timeout: remote.timeout(),
                        queue_timeout: remote.queue_timeout(),
                        permits: Semaphore::new(remote.max_concurrency()),
                    }))
                }
            };
            providers.insert(
                name.clone(),
                Configured {
                    upstream,
                    latency: OnceLock::new(),
                },
            );
        }
        if let Some(store) = config.rate_limit_store()
            && !breakers.is_empty()
        {
            let shared: Vec<(String, Arc<circuit::Breaker>)> = breakers
                .iter()
                .map(|(name, breaker)| (name.clone(), breaker.clone()))
                .collect();
            circuit::shared::start(
                store,
                &shared,
                metrics.routing.circuit_store_degraded.clone(),
            );
        }
        Ok(Upstreams {
            providers: Arc::new(providers),
            slots: Arc::new(slots),
            clients: Arc::new(clients),
            breakers: Arc::new(breakers),
            max_body_bytes: config.server().max_upstream_body_bytes(),
            metrics,
        })
    }

    /// Sends a System One request body to `provider` for `recipient` (over that
    /// recipient's own connections; `None`: the shared ones).
    pub(crate) async fn systemone(
        &self,
        provider: &str,
        recipient: Option<&str>,
        post: Post<'_>,
    ) -> Result<Reply, Error> {
        self.attempt(provider, recipient, post).await.result
    }

    /// [`Upstreams::systemone`], saying whether the request may have reached the provider.
    pub(crate) async fn attempt(
        &self,
        provider: &str,
        recipient: Option<&str>,
        post: Post<'_>,
    ) -> Attempt {
        let sent = AtomicBool::new(false);
        let result = self
            .call(provider, recipient, SYSTEMONE_PATH, Some(post), &sent)
            .await;
        Attempt {
            result,
            sent: sent.load(Ordering::Relaxed),
        }
    }

    /// Lists the provider's models (for `recipient`, as `systemone`).
    pub(crate) async fn models(
        &self,
        provider: &str,
        recipient: Option<&str>,
    ) -> Result<Reply, Error> {
        self.call(
            provider,
            recipient,
            MODELS_PATH,
            None,
            &AtomicBool::new(false),
        )
        .await
    }

    async fn call(
        &self,
        provider: &str,
        recipient: Option<&str>,
        path: &str,
        post: Option<Post<'_>>,
        sent: &AtomicBool,
    ) -> Result<Reply, Error> {
        let configured = self
            .providers
            .get(provider)
            .ok_or_else(|| Error::Rejected(format!("provider `{provider}` is not configured")))?;
        // The call's one clock reading: its latency and both of its deadlines count from it.
        let started = tokio::time::Instant::now();
        let result = match &configured.upstream {
            Upstream::Simulated => simulated(path, post.map(|post| post.json)),
            Upstream::Remote(remote) => {
                // A name with no slot cannot happen (slots come from the same configuration
                // as the keys); it would get the slot of calls with no recipient.
                let slot = recipient
                    .and_then(|name| self.slots.get(name))
                    .copied()
                    .unwrap_or(0);
                let client = self.clients.get(slot);
                remote
                    .call(client, slot, post, self.max_body_bytes, started, sent)
                    .await
            }
        };
        configured
            .latency
            .get_or_init(|| self.metrics.upstream_latency.with_label_values(&[provider]))
            .observe(started.elapsed().as_secs_f64());
        let kind = match &result {
            Err(error) => Some(error.kind()),
            Ok(Reply::Status { status, .. }) => Some(status_kind(*status)),
            Ok(Reply::Success(_)) => None,
        };
        if let Some(kind) = kind {
            self.metrics
                .upstream_errors
                .with_label_values(&[provider, kind])
                .inc();
        }
        result
    }
}

// === impl Remote ===

/// `application/json`, made at compile time (`from_static` at run time checks every
/// byte): what the proxy accepts from providers, and the type of its own JSON bodies.
pub(crate) const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");

impl Remote {
    /// Calls the provider; `started` is when the call began: the queue and the whole call
    /// have their deadlines from it (`queue_timeout`, `timeout`), so neither reads the clock.
    async fn call(
        &self,
        client: &Client,
        slot: usize,
        post: Option<Post<'_>>,
        max_body: usize,
        started: tokio::time::Instant,
        sent: &AtomicBool,
    ) -> Result<Reply, Error> {
        // A request that cannot get a slot soon is shed (503) rather than queued for its
        // whole budget: it never reached the provider, so the caller may retry elsewhere.
        let _permit = tokio::time::timeout_at(started + self.queue_timeout, self.permits.acquire())
            .await
            .map_err(|_| Error::Saturated)?
            .map_err(|_| Error::Saturated)?;
        let exchange = async {
            match &self.plain {
                Some(plain) => {
                    self.call_plain(plain.pools.get(slot), plain, post, max_body, sent)
                        .await
                }
                None => self.call_client(client, post, max_body, sent).await,
            }
        };
        tokio::time::timeout_at(started + self.timeout, exchange)
            .await
            .map_err(|_| Error::Timeout)?
    }

    /// The headers sent upstream, in order (without `host`, `content-length`).
    fn headers(&self, post: Option<&Post<'_>>, mut emit: impl FnMut(&HeaderName, &HeaderValue)) {
        let mut user_agent = false;
        if let Some(post) = post {
            emit(&CONTENT_TYPE, post.content_type);
            // Each forwarded name's first value (what `HeaderMap::get` returns), found in
            // one pass over the request's few fields instead of one hashed lookup per name.
            let forwarded = &FORWARDED;
            let mut found: [Option<&HeaderValue>; FORWARDED_HEADERS.len()] =
                [None; FORWARDED_HEADERS.len()];
            for (name, value) in post.headers {
                if let Some(at) = forwarded.iter().position(|forwarded| forwarded == name) {
                    found[at].get_or_insert(value);
                }
            }
            for (name, value) in forwarded.iter().zip(found) {
                if let Some(value) = value {
                    user_agent |= *name == USER_AGENT;
                    emit(name, value);
                }
            }
            for switch in post.switches {
                emit(
                    &HeaderName::from_static(switch.lower()),
                    &HeaderValue::from_static("true"),
                );
            }
        }
        emit(&ACCEPT, &APPLICATION_JSON);
        if !user_agent {
            emit(&USER_AGENT, &USER_AGENT_VALUE);
        }
        if let Some(authorization) = &self.authorization {
            emit(&AUTHORIZATION, authorization);
        }
    }

    /// An `http://` provider: the request written by the proxy over the loop's pool.
    async fn call_plain(
        &self,
        pool: &Arc<pool::Pool>,
        plain: &Plain,
        post: Option<Post<'_>>,
        max_body: usize,
        sent: &AtomicBool,
    ) -> Result<Reply, Error> {
        let (method, target, body): (&[u8], &Uri, &[Bytes]) = match &post {
            Some(post) => (b"POST", &plain.systemone, post.body),
            None => (b"GET", &plain.models, &[]),
        };
        let length: usize = body.iter().map(Bytes::len).sum();
        // One body segment (a JSON body) is copied after the head, so the request goes out
        // in one write; more (a multipart body's images) go out after the head as they are.
        let inline = match body {
            [one] => one.len(),
            _ => 0,
        };
        let mut request = Vec::with_capacity(512 + inline);
        request.extend_from_slice(method);
        request.push(b' ');
        request.extend_from_slice(
            target
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .as_bytes(),
        );
        request.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        request.extend_from_slice(plain.host.as_bytes());
        request.extend_from_slice(b"\r\n");
        self.headers(post.as_ref(), |name, value| {
            request.extend_from_slice(name.as_str().as_bytes());
            request.extend_from_slice(b": ");
            request.extend_from_slice(value.as_bytes());
            request.extend_from_slice(b"\r\n");
        });
        if post.is_some() {
            // Writing into a vector cannot fail.
            let _ = write!(request, "content-length: {length}\r\n");
        }
        request.extend_from_slice(b"\r\n");
        let read = |status: u16| {
            if (200..300).contains(&status) {
                Some(max_body)
            } else {
                wants_error_body(status, post.as_ref()).then_some(MAX_ERROR_BODY_BYTES)
            }
        };
        let response = match body {
            [] => pool.send_tracked(&request[..], &read, sent).await?,
            [one] => {
                request.extend_from_slice(one);
                pool.send_tracked(&request[..], &read, sent).await?
            }
            _ => {
                let segmented = pool::Segmented {
                    head: &request,
                    body,
                };
                pool.send_tracked(&segmented, &read, sent).await?
            }
        };
        match response.body {
            pool::Body::Read(body) if (200..300).contains(&response.status) => {
                Ok(Reply::Success(body))
            }
            body => {
                let body = match body {
                    pool::Body::Read(body) => Some(body),
                    pool::Body::Skipped | pool::Body::TooLarge => None,
                };
                Ok(status_reply(
                    response.status,
                    &response.hints,
                    body.as_deref(),
                    post.as_ref(),
                ))
            }
        }
    }

    /// An `https://` provider: hyper-util's pooled client.
    async fn call_client(
        &self,
        client: &Client,
        post: Option<Post<'_>>,
        max_body: usize,
        sent: &AtomicBool,
    ) -> Result<Reply, Error> {
        let (method, uri, body) = match &post {
            Some(post) => (Method::POST, self.systemone_url.clone(), post.body),
            None => (Method::GET, self.models_url.clone(), &[][..]),
        };
        // Reference counts of the segments, no copies.
        let mut request = Request::new(segments::Segments::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        let upstream_headers = request.headers_mut();
        upstream_headers.reserve(8);
        self.headers(post.as_ref(), |name, value| {
            upstream_headers.insert(name.clone(), value.clone());
        });
        // The client connects and writes as one step: counted as sent from here, unless it
        // says the connection could not be made.
        sent.store(true, Ordering::Relaxed);
        let response = client.request(request).await.map_err(|error| {
            let error = classify(error);
            if matches!(error, Error::Connect(_)) {
                sent.store(false, Ordering::Relaxed);
            }
            error
        })?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            // The kind of a client error is read from a bounded body, then the body is
            // dropped here: only the enum leaves this module.
            let (parts, body) = response.into_parts();
            let body = if wants_error_body(status, post.as_ref()) {
                Limited::new(body, MAX_ERROR_BODY_BYTES)
                    .collect()
                    .await
                    .ok()
                    .map(|body| body.to_bytes())
            } else {
                None
            };
            return Ok(status_reply(
                status,
                &parts.headers,
                body.as_deref(),
                post.as_ref(),
            ));
        }
        let declared = response
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max_body as u64) {
            return Err(Error::TooLarge);
        }
        let body = Limited::new(response.into_body(), max_body)
            .collect()
            .await
            .map_err(|error| {
                if error.is::<http_body_util::LengthLimitError>() {
                    Error::TooLarge
                } else {
                    Error::Transport(error)
                }
            })?;
        Ok(Reply::Success(body.to_bytes()))
    }
}

/// Whether the body of a non-2xx answer is read: a client error (but 401, 403, 429) to
/// a System One request, whose body names its kind (`wire::provider`).
fn wants_error_body(status: u16, post: Option<&Post<'_>>) -> bool {
    post.is_some() && (400..500).contains(&status) && !matches!(status, 401 | 403 | 429)
}

/// A non-2xx answer as the proxy keeps it: its status, the retry hints re-written (429
/// and 529) and the kind its bounded body names; the body itself goes no further.
fn status_reply(
    status: u16,
    headers: &HeaderMap,
    body: Option<&[u8]>,
    post: Option<&Post<'_>>,
) -> Reply {
    let (retry_after, retry_after_ms) = if status == 429 || status == 529 {
        retry_hints(headers, SystemTime::now())
    } else {
        (None, None)
    };
    let problem = match (post, body) {
        (Some(post), Some(body)) => provider_error(
            status,
            body,
            post.sent
                .map_or(&Value::Null, releasegate_core::wire::Asked::upstream),
        ),
        _ => None,
    };
    Reply::Status {
        status,
        retry_after,
        retry_after_ms,
        problem,
    }
}

/// A client error as the failure it is: a connection that could not be made (or not in
/// time: a connect timeout is a timeout), or an exchange that broke off.
fn classify(error: hyper_util::client::legacy::Error) -> Error {
    let source: &(dyn std::error::Error + 'static) = &error;
    let timed_out = std::iter::successors(Some(source), |cause| cause.source()).any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
    });
    if timed_out {
        Error::Timeout
    } else if error.is_connect() {
        Error::Connect(Box::new(error))
    } else {
        Error::Transport(Box::new(error))
    }
}

/// The `retry-after` a client receives: the provider's hint re-written by the proxy, never
/// its bytes. Delay-seconds (digits only) and HTTP dates (IMF-fixdate, RFC 850, asctime)
/// become whole seconds from `now` (a past date is 0), capped at `MAX_RETRY_AFTER_SECONDS`;
/// anything else is dropped.
fn retry_after(value: Option<&HeaderValue>, now: SystemTime) -> Option<HeaderValue> {
    let text = value?.to_str().ok()?.trim();
    let seconds = match digits(text) {
        Some(seconds) => seconds,
        None => {
            let date = httpdate::parse_http_date(text).ok()?;
            let ahead = date.duration_since(now).unwrap_or(Duration::ZERO);
            // Round up: retrying a fraction of a second early would be refused again.
            ahead.as_secs() + u64::from(ahead.subsec_nanos() > 0)
        }
    };
    Some(HeaderValue::from(seconds.min(MAX_RETRY_AFTER_SECONDS)))
}

/// The `retry-after-ms` a client receives: whole milliseconds (digits only), capped at
/// `MAX_RETRY_AFTER_SECONDS` in milliseconds and re-written; anything else is dropped.
fn retry_after_ms(value: Option<&HeaderValue>) -> Option<HeaderValue> {
    let millis = digits(value?.to_str().ok()?.trim())?;
    Some(HeaderValue::from(
        millis.min(MAX_RETRY_AFTER_SECONDS.saturating_mul(1000)),
    ))
}

/// Both retry hints whenever either is valid: the SDKs read `retry-after-ms` first and others
/// only `retry-after`, so one is derived from the other (seconds rounded up from
/// milliseconds); both re-written, never the provider's bytes.
fn retry_hints(
    headers: &axum::http::HeaderMap,
    now: SystemTime,
) -> (Option<HeaderValue>, Option<HeaderValue>) {
    let number =
        |value: Option<HeaderValue>| value.and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let seconds = number(retry_after(headers.get("retry-after"), now));
    let millis = number(retry_after_ms(headers.get("retry-after-ms")));
    let (seconds, millis) = match (seconds, millis) {
        (Some(s), Some(m)) => (Some(s), Some(m)),
        (Some(s), None) => (Some(s), Some(s.saturating_mul(1000))),
        (None, Some(m)) => (Some(m.div_ceil(1000)), Some(m)),
        (None, None) => (None, None),
    };
    (
        seconds.map(HeaderValue::from),
        millis.map(HeaderValue::from),
    )
}

/// A non-negative integer written with ASCII digits only; saturates instead of overflowing.
fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.bytes().fold(0u64, |n, b| {
        n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

fn simulated(path: &str, body: Option<&Bytes>) -> Result<Reply, Error> {
    let answer = match (path, body) {
        ("/v1/models", _) => serde_json::json!({"models": [{
            "name": releasegate_sim::simulate::LATEST_MODEL,
            "description": "In-process deterministic simulator of a System One decision model.",
            "release_date": "2026-11-01",
        }]}),
        (_, Some(body)) => {
            let request: Value = serde_json::from_slice(body)
                .map_err(|_| Error::Rejected("the request body is not valid JSON".into()))?;
            releasegate_sim::simulate::respond(&request)
                .map_err(|error| Error::Rejected(error.to_string()))?
        }
        (_, None) => return Err(Error::Rejected("no request body".into())),
    };
    let bytes =
        serde_json::to_vec(&answer).map_err(|_| Error::Rejected("unserializable answer".into()))?;
    Ok(Reply::Success(Bytes::from(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider_config(base_url: &str, key: &str) -> Config {
        let text = format!(
            "[providers.up]\nkind = \"systemone\"\nbase_url = \"{base_url}\"\napi_key_env = \"KEY\"\n\
             [[recipients]]\nname = \"r\"\nkey_sha256 = \"{}\"\ncontracts = [\"c\"]\n\
             [contracts.c]\nprovider = \"up\"\n[contracts.c.questions.q]\nclasses = [\"A\", \"B\"]\nview = \"full_native\"\n",
            "0".repeat(64)
        );
        let key = key.to_string();
        crate::load::from_toml_with_env(&text, &move |_| Some(key.clone())).unwrap()
    }

    /// An `https://` provider goes through TLS: a server that answers in plain HTTP fails
    /// the handshake, which is a connection failure (502), never a plain-text exchange.
    #[tokio::test]
    async fn https_providers_are_reached_over_tls() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Ok((mut socket, _)) = listener.accept().await {
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                    .await;
            }
        });
        let upstreams = Upstreams::new(
            &provider_config(&format!("https://127.0.0.1:{port}"), "sk-1"),
            Metrics::new().unwrap(),
        )
        .unwrap();
        let body = Bytes::from_static(b"{}");
        let json = HeaderValue::from_static("application/json");
        let post = Post {
            body: std::slice::from_ref(&body),
            content_type: &json,
            json: &body,
            sent: None,
            headers: &HeaderMap::new(),
            switches: &[],
        };
        let reply = upstreams.systemone("up", None, post).await;
        assert!(matches!(reply, Err(Error::Connect(_))), "{reply:?}");
        server.abort();
    }

    #[test]
    fn provider_urls_and_keys_are_checked_once_at_start_up() {
        let metrics = || Metrics::new().unwrap();
        let upstreams =
            Upstreams::new(&provider_config("http://127.0.0.1:9/", "sk-1"), metrics()).unwrap();
        let Upstream::Remote(remote) = &upstreams.providers["up"].upstream else {
            panic!("not remote");
        };
        assert_eq!(
            remote.systemone_url.to_string(),
            "http://127.0.0.1:9/v1/systemone"
        );
        assert_eq!(
            remote.models_url.to_string(),
            "http://127.0.0.1:9/v1/models"
        );
        // The key is held as a sensitive header value: never printed.
        assert!(remote.authorization.as_ref().unwrap().is_sensitive());
        assert!(!format!("{upstreams:?}").contains("sk-1"));

        // Bad URLs and keys are refused earlier, by the configuration's checks.
    }

    fn seconds(text: &str, now: SystemTime) -> Option<String> {
        let value = HeaderValue::from_str(text).unwrap();
        retry_after(Some(&value), now).map(|v| v.to_str().unwrap().to_string())
    }

    fn millis(text: &str) -> Option<String> {
        let value = HeaderValue::from_str(text).unwrap();
        retry_after_ms(Some(&value)).map(|v| v.to_str().unwrap().to_string())
    }

    #[test]
    fn retry_after_is_a_capped_integer_written_by_the_proxy() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 2015-10-21 07:28:00
        assert_eq!(seconds("120", now).as_deref(), Some("120"));
        assert_eq!(seconds("0", now).as_deref(), Some("0"));
        assert_eq!(seconds("007", now).as_deref(), Some("7"));
        assert_eq!(seconds(" 30 ", now).as_deref(), Some("30"));
        assert_eq!(seconds("86401", now).as_deref(), Some("86400"));
        assert_eq!(
            seconds("99999999999999999999999999", now).as_deref(),
            Some("86400")
        );
        for bad in [
            "",
            "-1",
            "1.5",
            "+5",
            "1e3",
            "12 34",
            "0x10",
            "<script>",
            "7; a=b",
            "NaN",
            "Wed, 21 Oct 2015 07:28:00 GMT junk",
            "Wed, 32 Oct 2015 07:28:00 GMT",
            "tomorrow",
        ] {
            assert_eq!(seconds(bad, now), None, "{bad:?}");
        }
        assert!(retry_after(None, now).is_none());
    }

    #[test]
    fn retry_after_dates_become_seconds_from_now() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 2015-10-21 07:28:00
        assert_eq!(
            seconds("Wed, 21 Oct 2015 07:30:00 GMT", now).as_deref(),
            Some("120")
        );
        // RFC 850 and asctime forms are HTTP dates too.
        assert_eq!(
            seconds("Wednesday, 21-Oct-15 07:29:00 GMT", now).as_deref(),
            Some("60")
        );
        assert_eq!(
            seconds("Wed Oct 21 07:28:05 2015", now).as_deref(),
            Some("5")
        );
        // In the past: retry now. Years ahead: capped.
        assert_eq!(
            seconds("Tue, 20 Oct 2015 07:28:00 GMT", now).as_deref(),
            Some("0")
        );
        assert_eq!(
            seconds("Fri, 01 Jan 2100 00:00:00 GMT", now).as_deref(),
            Some("86400")
        );
        let later = now + Duration::from_millis(500);
        assert_eq!(
            seconds("Wed, 21 Oct 2015 07:30:00 GMT", later).as_deref(),
            Some("120")
        );
    }

    #[test]
    fn every_status_and_failure_has_a_listed_kind() {
        for status in 100..=999 {
            if !(200..300).contains(&status) {
                assert!(ERROR_KINDS.contains(&status_kind(status)), "{status}");
            }
        }
        assert_eq!(status_kind(401), "auth");
        assert_eq!(status_kind(403), "auth");
        assert_eq!(status_kind(404), "status_4xx");
        assert_eq!(status_kind(503), "status_5xx");
        for error in [
            Error::Timeout,
            Error::TooLarge,
            Error::Saturated,
            Error::Rejected(String::new()),
        ] {
            assert!(ERROR_KINDS.contains(&error.kind()));
        }
    }

    #[test]
    fn retry_after_ms_is_a_capped_integer() {
        assert_eq!(millis("1500").as_deref(), Some("1500"));
        assert_eq!(millis("0").as_deref(), Some("0"));
        assert_eq!(millis("86400001").as_deref(), Some("86400000"));
        for bad in ["1500.5", "-3", "1e3", "Wed, 21 Oct 2015 07:28:00 GMT", "x"] {
            assert_eq!(millis(bad), None, "{bad:?}");
        }
    }
}
