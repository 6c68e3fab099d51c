//! The configuration as read, before validation.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::contract::{Shape, Usage, View};
use crate::mechanism;

mod contracts;
pub mod limits;
mod outputs;
mod policy;
mod providers;
mod recipients;
mod server;
pub(crate) mod unloaded;
mod validate;

/// The whole file. Its top-level keys are also the only ones read from the environment
/// (`sections`), so a section added here is overridable without a second list.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    providers: BTreeMap<String, RawProvider>,
    #[serde(default)]
    recipients: Vec<RawRecipient>,
    #[serde(default)]
    contracts: BTreeMap<String, RawContract>,
    #[serde(default)]
    decision_log: Option<RawDecisionLog>,
    #[serde(default)]
    rate_limit_store: Option<RawRateLimitStore>,
    #[serde(default)]
    tracing: Option<RawTracing>,
}

/// `[tracing]`: span export (absent: no export).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTracing {
    otlp_endpoint: Option<String>,
    #[serde(default = "default_service_name")]
    service_name: String,
}

fn default_service_name() -> String {
    "releasegate".to_string()
}

/// `[rate_limit_store]`: shared rate limits (absent: per replica).
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum RawRateLimitStore {
    Redis {
        url: String,
        password_env: Option<String>,
        #[serde(default = "default_store_timeout_ms")]
        timeout_ms: u64,
        #[serde(default = "default_store_retry_interval_ms")]
        retry_interval_ms: u64,
        #[serde(default = "default_store_key_prefix")]
        key_prefix: String,
    },
}

fn default_store_timeout_ms() -> u64 {
    100
}

fn default_store_retry_interval_ms() -> u64 {
    1000
}

fn default_store_key_prefix() -> String {
    "releasegate".to_string()
}

/// `[decision_log]`: one JSON line per request (off when the section is absent).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDecisionLog {
    path: String,
    #[serde(default = "default_decision_log_max_bytes")]
    max_bytes: u64,
    #[serde(default = "default_decision_log_max_files")]
    max_files: u64,
    #[serde(default = "default_decision_log_queue_capacity")]
    queue_capacity: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawServer {
    listen: String,
    admin_listen: String,
    max_body_bytes: u64,
    max_upstream_body_bytes: u64,
    max_image_bytes: u64,
    max_asset_bytes: u64,
    max_decoded_bytes_in_flight: Option<u64>,
    decoded_bytes_queue_timeout_ms: u64,
    shutdown_grace_ms: u64,
    header_read_timeout_ms: u64,
    body_read_timeout_ms: u64,
    idle_timeout_ms: u64,
    max_connections: u64,
    admin_max_connections: u64,
    drain_delay_ms: u64,
    watch_config: bool,
    watch_interval_ms: u64,
    worker_threads: u64,
    access_log: bool,
    certificates: Option<String>,
    certification: crate::certificate::Mode,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum RawProvider {
    Systemone {
        base_url: String,
        api_key_env: Option<String>,
        #[serde(default = "default_timeout_ms")]
        timeout_ms: u64,
        #[serde(default = "default_max_concurrency")]
        max_concurrency: u64,
        #[serde(default = "default_queue_timeout_ms")]
        queue_timeout_ms: u64,
        /// Opens after `failures` failures within `window_ms`; half-opens after `cooldown_ms`.
        #[serde(default)]
        circuit: Option<RawCircuit>,
    },
    // A struct variant, so that unknown keys beside `kind` are errors as everywhere else.
    Simulated {},
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecipient {
    name: String,
    key_sha256: String,
    contracts: Vec<String>,
    #[serde(default)]
    rate_limit: Option<RawRateLimit>,
    /// Most requests of this recipient in flight at once (absent: no limit).
    #[serde(default)]
    max_in_flight: Option<u64>,
    /// A leakage budget for everything the recipient can ask for, together.
    #[serde(default)]
    policy: Option<RawPolicy>,
}

/// `rate_limit = { requests_per_second = 10, burst = 20 }` of a recipient.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    requests_per_second: f64,
    /// Default: `requests_per_second` rounded up (at least 1).
    burst: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawContract {
    /// One provider (`provider = "x"`) or several in priority order (`providers = [...]`).
    #[serde(default)]
    provider: Option<String>,
    #[serde(default)]
    providers: Option<Vec<String>>,
    /// Statuses that move a request to the next provider (default: 429 and 5xx overload).
    #[serde(default)]
    failover_on: Option<Vec<u64>>,
    /// Whether a request a provider may have received is sent to the next one.
    #[serde(default)]
    retry_sent: bool,
    /// `cache = { ttl_s, max_bytes, scope, store }`: the exact cache of native answers.
    #[serde(default)]
    cache: Option<RawCache>,
    model: Option<String>,
    #[serde(default = "default_usage")]
    usage: Usage,
    #[serde(default)]
    shape: Shape,
    #[serde(default)]
    questions: BTreeMap<String, RawQuestion>,
    #[serde(default)]
    public: Vec<crate::contract::PublicField>,
    #[serde(default)]
    policy: Option<RawPolicy>,
    /// `capture = { path = "...", sample_rate = 0.1, max_bytes = ... }`: live capture of a
    /// sample of native answers (off when absent).
    #[serde(default)]
    capture: Option<RawCapture>,
    #[serde(default)]
    forward_headers: Vec<String>,
}

/// A contract's `cache` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    ttl_s: u64,
    max_bytes: u64,
    #[serde(default = "default_cache_scope")]
    scope: crate::contract::CacheScope,
    #[serde(default = "default_cache_store")]
    store: crate::contract::CacheStore,
}

fn default_cache_scope() -> crate::contract::CacheScope {
    crate::contract::CacheScope::Recipient
}

fn default_cache_store() -> crate::contract::CacheStore {
    crate::contract::CacheStore::Memory
}

/// A provider's `circuit = { failures, window_ms, cooldown_ms }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCircuit {
    failures: u64,
    window_ms: u64,
    cooldown_ms: u64,
}

/// A contract's `capture` table: where and how much of its native traffic is kept as worlds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCapture {
    path: String,
    sample_rate: f64,
    #[serde(default = "default_decision_log_max_bytes")]
    max_bytes: u64,
    #[serde(default = "default_decision_log_max_files")]
    max_files: u64,
    #[serde(default = "default_capture_queue_capacity")]
    queue_capacity: u64,
}

/// A contract's `policy = { keep = [...], hide = [...], max_recovery_gain = 0.05 }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    keep: Vec<String>,
    #[serde(default)]
    hide: Vec<String>,
    max_recovery_gain: Option<f64>,
}

/// One `[contracts.NAME.questions.ID]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQuestion {
    /// Required but for box questions, which have none.
    #[serde(default)]
    pub(crate) classes: Vec<String>,
    /// `choice`, `score`, `noul` or `box`; by default what the classes imply.
    #[serde(default, rename = "type")]
    pub(crate) kind: Option<crate::wire::Kind>,
    /// The question's instructions (System One content).
    #[serde(default)]
    pub(crate) instructions: Option<serde_json::Value>,
    /// Class → description (System One content).
    #[serde(default)]
    pub(crate) descriptions: BTreeMap<String, serde_json::Value>,
    /// Let the caller's instructions and descriptions through (not certifiable).
    #[serde(default)]
    pub(crate) caller_text: bool,
    pub(crate) view: View,
    #[serde(default)]
    pub(crate) coarsen: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) withhold_labels: Vec<String>,
    #[serde(default)]
    pub(crate) mechanism: mechanism::Raw,
    #[serde(default)]
    pub(crate) workflows: Option<crate::workflow::RawWorkflows>,
}

impl RawQuestion {
    /// The files this question names (WCPQ codebooks, a logistic posterior model), resolved
    /// as validation resolves them: what a configuration reload must watch.
    fn files(&self, base_dir: &Path) -> Vec<std::path::PathBuf> {
        let mut files = Vec::new();
        if let mechanism::Raw::Wcpq {
            codebook,
            codebooks,
            ..
        } = &self.mechanism
        {
            files.extend(
                codebook
                    .iter()
                    .chain(codebooks.values())
                    .map(|c| base_dir.join(c)),
            );
        }
        if let Some(crate::workflow::RawPosterior::Table(table)) = self
            .workflows
            .as_ref()
            .and_then(|workflows| workflows.posterior.as_ref())
            && let Some(model) = &table.model
        {
            files.push(base_dir.join(model));
        }
        files
    }
}

/// Top-level keys of `RawConfig`, read from its own serde definition: the struct is the one list.
pub(crate) fn sections() -> &'static [&'static str] {
    field_names::<RawConfig>()
}

/// The field names of a struct, read from its own serde definition (the keys of its table).
pub(crate) fn field_names<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{self, Visitor};
    /// A deserializer that only records the field names serde asks it for.
    struct FieldNames<'a>(&'a mut &'static [&'static str]);
    impl<'de> de::Deserializer<'de> for FieldNames<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("field names only"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("field names only"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldNames(&mut fields));
    fields
}

/// Pushes a problem unless `min <= value <= max`.
fn check_range(problems: &mut Vec<String>, key: &str, value: u64, (min, max): (u64, u64)) {
    if !(min..=max).contains(&value) {
        problems.push(format!(
            "{key}: must be between {min} and {max}, got {value}"
        ));
    }
}

fn default_decision_log_max_bytes() -> u64 {
    100 * 1024 * 1024
}

fn default_decision_log_max_files() -> u64 {
    5
}

fn default_decision_log_queue_capacity() -> u64 {
    4096
}

fn default_capture_queue_capacity() -> u64 {
    1024
}

fn default_timeout_ms() -> u64 {
    30_000
}

fn default_max_concurrency() -> u64 {
    64
}

fn default_queue_timeout_ms() -> u64 {
    1_000
}

/// Deny by default: token counts reveal the input size, so they go out only when a contract says `keep`.
fn default_usage() -> Usage {
    Usage::Drop
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            listen: "127.0.0.1:8080".to_string(),
            admin_listen: "127.0.0.1:9090".to_string(),
            max_body_bytes: 1024 * 1024,
            max_upstream_body_bytes: 8 * 1024 * 1024,
            max_image_bytes: 16 * 1024 * 1024,
            max_asset_bytes: 32 * 1024 * 1024,
            max_decoded_bytes_in_flight: None,
            decoded_bytes_queue_timeout_ms: 1_000,
            shutdown_grace_ms: 10_000,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            max_connections: 10_000,
            admin_max_connections: 64,
            drain_delay_ms: 0,
            watch_config: false,
            watch_interval_ms: 1_000,
            worker_threads: 0,
            access_log: true,
            certificates: None,
            certification: crate::certificate::Mode::Off,
        }
    }
}
