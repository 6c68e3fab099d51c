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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::http::Uri;
use axum::http::header::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use prometheus::Histogram;
use secrecy::ExposeSecret;
use serde_json::Value;
use tokio::sync::Semaphore;

mod circuit;
mod error;
mod failover;
mod hints;
pub(crate) mod pool;
mod remote;
mod segments;

pub(crate) use error::{Attempt, ERROR_KINDS, Error, Reply, SetupError, status_kind};
pub(crate) use remote::APPLICATION_JSON;
use remote::{Plain, Remote};

use crate::metrics::Metrics;
use releasegate_core::config::{Config, Provider};
use releasegate_core::contract::ForwardHeader;

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
    /// call (so the series appears then, as it would by label) and observed directly after;
    /// one per thread shard, of that shard's copy of the family.
    latency: crate::metrics::PerShard<OnceLock<Histogram>>,
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
                    latency: Default::default(),
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
        let (result, took) = self
            .call(provider, recipient, SYSTEMONE_PATH, Some(post), &sent)
            .await;
        Attempt {
            result,
            sent: sent.load(Ordering::Relaxed),
            took,
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
        .0
    }

    async fn call(
        &self,
        provider: &str,
        recipient: Option<&str>,
        path: &str,
        post: Option<Post<'_>>,
        sent: &AtomicBool,
    ) -> (Result<Reply, Error>, Duration) {
        let Some(configured) = self.providers.get(provider) else {
            let error = Error::Rejected(format!("provider `{provider}` is not configured"));
            return (Err(error), Duration::ZERO);
        };
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
        let took = started.elapsed();
        configured
            .latency
            .here()
            .get_or_init(|| {
                let family = self.metrics.upstream_latency.here();
                family.with_label_values(&[provider])
            })
            .observe(took.as_secs_f64());
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
        (result, took)
    }
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
mod tests;
