//! Providers: a remote System One endpoint over reqwest, or the in-process
//! simulator. Upstream bodies never reach clients; this module only hands back
//! parsed JSON or a status.
//!
//! Each event loop of the server has its own `reqwest::Client` (same settings),
//! so a request goes out over connections driven by its own thread: a pooled
//! connection's task runs on the runtime that opened it, and a client shared
//! by several loops would hand requests across threads.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use secrecy::ExposeSecret;
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::metrics::Metrics;
use releasegate_core::config::{Config, Provider};

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

/// Upstream failures (each maps to one client status).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The provider did not answer in time (504).
    #[error("upstream timed out")]
    Timeout,
    /// The provider could not be reached (502).
    #[error("upstream unreachable")]
    Connect(#[source] reqwest::Error),
    /// The connection failed mid-exchange (502).
    #[error("upstream transport failure")]
    Transport(#[source] reqwest::Error),
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
    },
}

/// Why the providers could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The shared HTTP client could not be built.
    #[error("cannot build the HTTP client")]
    Client(#[from] reqwest::Error),
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

/// All configured providers.
#[derive(Clone, Debug)]
pub(crate) struct Upstreams {
    providers: Arc<BTreeMap<String, Upstream>>,
    /// One HTTP client per event loop.
    clients: Arc<Clients>,
    max_body_bytes: usize,
    metrics: Metrics,
}

/// The HTTP clients, one per event loop (at least one).
#[derive(Debug)]
struct Clients {
    first: reqwest::Client,
    others: Vec<reqwest::Client>,
}

impl Clients {
    /// The client of event loop `index` (the first for an unknown index).
    fn get(&self, index: usize) -> &reqwest::Client {
        index
            .checked_sub(1)
            .and_then(|other| self.others.get(other))
            .unwrap_or(&self.first)
    }
}

#[derive(Debug)]
enum Upstream {
    Remote(Box<Remote>),
    Simulated,
}

#[derive(Debug)]
struct Remote {
    /// `{base_url}/v1/systemone`, parsed once: a URL is not re-parsed per call.
    systemone_url: Url,
    /// `{base_url}/v1/models`.
    models_url: Url,
    /// `Bearer {key}`, marked sensitive (never printed by `Debug`).
    authorization: Option<HeaderValue>,
    timeout: Duration,
    queue_timeout: Duration,
    permits: Semaphore,
}

// === impl Upstreams ===

impl Upstreams {
    /// Builds the HTTP clients (one per event loop) and the providers.
    pub(crate) fn new(config: &Config, metrics: Metrics) -> Result<Upstreams, SetupError> {
        // A second install (tests build many apps per process) is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = || {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(Duration::from_secs(5))
                .pool_idle_timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(64)
                .tcp_nodelay(true)
                .user_agent(concat!("releasegate/", env!("CARGO_PKG_VERSION")))
                .build()
        };
        let clients = Clients {
            first: client()?,
            others: (1..config.server.event_loops())
                .map(|_| client())
                .collect::<Result<Vec<_>, _>>()?,
        };
        let mut providers = BTreeMap::new();
        for (name, provider) in &config.providers {
            let upstream = match provider {
                Provider::Simulated => Upstream::Simulated,
                Provider::SystemOne(remote) => {
                    let url = |path: &str| {
                        let url = format!("{}{path}", remote.base_url);
                        Url::parse(&url).map_err(|error| SetupError::BaseUrl {
                            provider: name.clone(),
                            url: remote.base_url.clone(),
                            reason: error.to_string(),
                        })
                    };
                    let authorization = match &remote.api_key {
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
                    Upstream::Remote(Box::new(Remote {
                        systemone_url: url(SYSTEMONE_PATH)?,
                        models_url: url(MODELS_PATH)?,
                        authorization,
                        timeout: remote.timeout,
                        queue_timeout: remote.queue_timeout,
                        permits: Semaphore::new(remote.max_concurrency),
                    }))
                }
            };
            providers.insert(name.clone(), upstream);
        }
        Ok(Upstreams {
            providers: Arc::new(providers),
            clients: Arc::new(clients),
            max_body_bytes: config.server.max_upstream_body_bytes,
            metrics,
        })
    }

    /// Sends a System One request body to `provider`.
    pub(crate) async fn systemone(
        &self,
        provider: &str,
        body: Bytes,
        headers: &HeaderMap,
    ) -> Result<Reply, Error> {
        self.call(provider, SYSTEMONE_PATH, Some((body, headers)))
            .await
    }

    /// Lists the provider's models.
    pub(crate) async fn models(&self, provider: &str) -> Result<Reply, Error> {
        self.call(provider, MODELS_PATH, None).await
    }

    async fn call(
        &self,
        provider: &str,
        path: &str,
        post: Option<(Bytes, &HeaderMap)>,
    ) -> Result<Reply, Error> {
        let upstream = self
            .providers
            .get(provider)
            .ok_or_else(|| Error::Rejected(format!("provider `{provider}` is not configured")))?;
        let started = Instant::now();
        let result = match upstream {
            Upstream::Simulated => simulated(path, post.map(|(body, _)| body)),
            Upstream::Remote(remote) => {
                let client = self.clients.get(EVENT_LOOP.with(Cell::get));
                remote.call(client, post, self.max_body_bytes).await
            }
        };
        self.metrics
            .upstream_latency
            .with_label_values(&[provider])
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

impl Remote {
    async fn call(
        &self,
        client: &reqwest::Client,
        post: Option<(Bytes, &HeaderMap)>,
        max_body: usize,
    ) -> Result<Reply, Error> {
        let deadline = Instant::now() + self.timeout;
        // A request that cannot get a slot soon is shed (503) rather than queued for its
        // whole budget: it never reached the provider, so the caller may retry elsewhere.
        let _permit = tokio::time::timeout(self.queue_timeout, self.permits.acquire())
            .await
            .map_err(|_| Error::Saturated)?
            .map_err(|_| Error::Saturated)?;
        let json = HeaderValue::from_static("application/json");
        let mut upstream_headers = HeaderMap::with_capacity(8);
        let mut request = match post {
            Some((body, headers)) => {
                let mut request = reqwest::Request::new(Method::POST, self.systemone_url.clone());
                upstream_headers.insert(CONTENT_TYPE, json.clone());
                for name in FORWARDED {
                    if let Some(value) = headers.get(&name) {
                        upstream_headers.insert(name, value.clone());
                    }
                }
                *request.body_mut() = Some(body.into());
                request
            }
            None => reqwest::Request::new(Method::GET, self.models_url.clone()),
        };
        upstream_headers.insert(ACCEPT, json);
        if let Some(authorization) = &self.authorization {
            upstream_headers.insert(AUTHORIZATION, authorization.clone());
        }
        *request.headers_mut() = upstream_headers;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let exchange = async {
            let mut response = client.execute(request).await.map_err(classify)?;
            let status = response.status().as_u16();
            if !(200..300).contains(&status) {
                let (retry_after, retry_after_ms) = if status == 429 || status == 529 {
                    (
                        retry_after(response.headers().get("retry-after"), SystemTime::now()),
                        retry_after_ms(response.headers().get("retry-after-ms")),
                    )
                } else {
                    (None, None)
                };
                return Ok(Reply::Status {
                    status,
                    retry_after,
                    retry_after_ms,
                });
            }
            if response
                .content_length()
                .is_some_and(|n| n > max_body as u64)
            {
                return Err(Error::TooLarge);
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(classify)? {
                if body.len() + chunk.len() > max_body {
                    return Err(Error::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(Reply::Success(Bytes::from(body)))
        };
        tokio::time::timeout(remaining, exchange)
            .await
            .map_err(|_| Error::Timeout)?
    }
}

fn classify(error: reqwest::Error) -> Error {
    if error.is_timeout() {
        Error::Timeout
    } else if error.is_connect() {
        Error::Connect(error)
    } else {
        Error::Transport(error)
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

/// A non-negative integer written with ASCII digits only; saturates instead of overflowing.
fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.bytes().fold(0u64, |n, b| {
        n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

fn simulated(path: &str, body: Option<Bytes>) -> Result<Reply, Error> {
    let answer = match (path, body) {
        ("/v1/models", _) => serde_json::json!({"models": [{
            "name": releasegate_sim::simulate::LATEST_MODEL,
            "description": "In-process deterministic simulator of a System One decision model.",
            "release_date": "2026-11-01",
        }]}),
        (_, Some(body)) => {
            let request: Value = serde_json::from_slice(&body)
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

    #[test]
    fn provider_urls_and_keys_are_checked_once_at_start_up() {
        let metrics = || Metrics::new().unwrap();
        let upstreams =
            Upstreams::new(&provider_config("http://127.0.0.1:9/", "sk-1"), metrics()).unwrap();
        let Upstream::Remote(remote) = &upstreams.providers["up"] else {
            panic!("not remote");
        };
        assert_eq!(
            remote.systemone_url.as_str(),
            "http://127.0.0.1:9/v1/systemone"
        );
        assert_eq!(remote.models_url.as_str(), "http://127.0.0.1:9/v1/models");
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
