//! The configuration as read, before validation.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use serde::Deserialize;

use super::{Config, EnvLookup, Error, Provider, Recipient, RemoteProvider, Server};
use crate::contract::{Contract, Shape, Usage, View};
use crate::mechanism;

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
    provider: String,
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

/// Validates a contract's leakage policy (`docs/gate.md`).
fn build_policy(
    key: &str,
    raw: RawPolicy,
    questions: &BTreeMap<String, RawQuestion>,
    problems: &mut Vec<String>,
) -> Option<crate::contract::LeakagePolicy> {
    use crate::contract::{Field, Hidden, KeepField, LeakagePolicy};
    let before = problems.len();
    let mut keep = Vec::new();
    for entry in &raw.keep {
        let (question, field) = match entry.rsplit_once('.') {
            Some((question, field)) => (Some(question.to_string()), field),
            None => (None, entry.as_str()),
        };
        let Some(field) = Field::parse(field) else {
            problems.push(format!(
                "{key}.keep: `{entry}` is not FIELD or QUESTION.FIELD with FIELD one of choice, probabilities, confidence"
            ));
            continue;
        };
        if let Some(question) = &question
            && !questions.contains_key(question)
        {
            problems.push(format!(
                "{key}.keep: `{entry}` names a question the contract does not cover"
            ));
            continue;
        }
        keep.push(KeepField { question, field });
    }
    let mut hide = Vec::new();
    for entry in &raw.hide {
        match entry.as_str() {
            "secret" => hide.push(Hidden::Secret),
            other => problems.push(format!(
                "{key}.hide: `{other}` is unknown (the audit measures `secret`)"
            )),
        }
    }
    let max_recovery_gain = match raw.max_recovery_gain {
        Some(gain) if !(gain.is_finite() && (0.0..=1.0).contains(&gain)) => {
            problems.push(format!(
                "{key}.max_recovery_gain: must be a number in [0, 1], got {gain}"
            ));
            0.0
        }
        Some(_) if hide.is_empty() => {
            problems.push(format!(
                "{key}.max_recovery_gain: bounds what `hide` names; add hide = [\"secret\"]"
            ));
            0.0
        }
        Some(gain) => gain,
        None => 0.0,
    };
    (problems.len() == before).then_some(LeakagePolicy {
        keep,
        hide,
        max_recovery_gain,
    })
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
    /// The files this question names (a WCPQ codebook, a logistic posterior model), resolved
    /// as validation resolves them: what a configuration reload must watch.
    fn files(&self, base_dir: &Path) -> Vec<std::path::PathBuf> {
        let mut files = Vec::new();
        if let mechanism::Raw::Wcpq { codebook, .. } = &self.mechanism {
            files.push(base_dir.join(codebook));
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

/// Inclusive ranges of the numeric keys. Whatever validation accepts must also start and
/// serve: these keep every value far from the limits of what uses it (tokio's semaphore,
/// timers, buffers) and catch typos such as an extra three zeros.
pub mod limits {
    /// `server.max_body_bytes`, `server.max_upstream_body_bytes`, `server.max_image_bytes`,
    /// `server.max_asset_bytes`: 1 byte to 1 GiB.
    pub const BODY_BYTES: (u64, u64) = (1, 1 << 30);
    /// `server.shutdown_grace_ms` and `server.drain_delay_ms`: up to one hour.
    pub const SHUTDOWN_GRACE_MS: (u64, u64) = (0, 3_600_000);
    /// `providers.*.timeout_ms` and the `server` read and idle timeouts: 1 ms to one hour.
    pub const TIMEOUT_MS: (u64, u64) = (1, 3_600_000);
    /// `providers.*.queue_timeout_ms`: up to one hour (and at most `timeout_ms` in effect).
    pub const QUEUE_TIMEOUT_MS: (u64, u64) = (0, 3_600_000);
    /// `providers.*.max_concurrency`: 1 to 100,000 requests in flight (far below tokio's
    /// `Semaphore::MAX_PERMITS`, beyond which the semaphore panics).
    pub const MAX_CONCURRENCY: (u64, u64) = (1, 100_000);
    /// `server.watch_interval_ms`: 50 ms to one hour.
    pub const WATCH_INTERVAL_MS: (u64, u64) = (50, 3_600_000);
    /// `decision_log.max_bytes`: a file is rotated beyond this size; 4 KiB to 1 TiB.
    pub const DECISION_LOG_MAX_BYTES: (u64, u64) = (4096, 1 << 40);
    /// `decision_log.max_files`: rotated files kept beside the live one, 1 to 1000.
    pub const DECISION_LOG_MAX_FILES: (u64, u64) = (1, 1000);
    /// `decision_log.queue_capacity`: lines waiting for the writer, 1 to 1,000,000.
    pub const DECISION_LOG_QUEUE: (u64, u64) = (1, 1_000_000);
    /// `recipients[].rate_limit.requests_per_second`: one per 1000 s to a million per second.
    pub const RATE_LIMIT_RPS: (f64, f64) = (0.001, 1_000_000.0);
    /// `recipients[].rate_limit.burst`: 1 to 1,000,000 requests.
    pub const RATE_LIMIT_BURST: (u64, u64) = (1, 1_000_000);
    /// `server.max_connections` and `server.admin_max_connections`: far above any
    /// file-descriptor limit a single process gets.
    pub const MAX_CONNECTIONS: (u64, u64) = (1, 1_000_000);
    /// `rate_limit_store.timeout_ms`: 1 ms to 10 s per call.
    pub const STORE_TIMEOUT_MS: (u64, u64) = (1, 10_000);
    /// `rate_limit_store.retry_interval_ms`: 10 ms to 10 minutes.
    pub const STORE_RETRY_INTERVAL_MS: (u64, u64) = (10, 600_000);
    /// `server.worker_threads`: 0 (one per CPU) to 1024 event loops.
    pub const WORKER_THREADS: (u64, u64) = (0, 1024);
    /// `contracts.*.questions.*.classes`: 2 to 255 options (the API's own limit).
    pub const CLASSES: (usize, usize) = (2, crate::workflow::MAX_CLASSES);
    /// `contracts.*.questions.*.workflows.costs`: the largest cost magnitude (profiles
    /// double costs and plans sum them: every sum stays finite).
    pub const MAX_COST: f64 = 1e12;
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

// === impl RawConfig ===

impl RawConfig {
    /// Validates into typed config; `env` reads provider keys.
    pub(crate) fn validate(
        self,
        source: String,
        base_dir: &Path,
        inputs: &super::Inputs<'_>,
    ) -> Result<Config, Error> {
        let mut problems = Vec::new();
        let server = validate_server(self.server, base_dir, &mut problems);
        let decision_log = self
            .decision_log
            .map(|raw| validate_decision_log(raw, base_dir, &mut problems));
        let rate_limit_store = self
            .rate_limit_store
            .and_then(|raw| validate_rate_limit_store(raw, inputs.env, &mut problems));
        let tracing = self
            .tracing
            .and_then(|raw| validate_tracing(raw, &mut problems));

        let mut providers = BTreeMap::new();
        let declared: std::collections::BTreeSet<String> = self.providers.keys().cloned().collect();
        for (name, raw) in self.providers {
            if let Some(provider) = validate_provider(&name, raw, inputs.env, &mut problems) {
                providers.insert(name, provider);
            }
        }

        let mut contracts = BTreeMap::new();
        let mut captures = BTreeMap::new();
        let mut files = Vec::new();
        for (name, raw) in self.contracts {
            let key = format!("contracts.{name}");
            if let Some(capture) = raw.capture {
                let capture =
                    validate_capture(&format!("{key}.capture"), capture, base_dir, &mut problems);
                captures.insert(name.clone(), capture);
            }
            // A declared but invalid provider has its own problem already.
            if !declared.contains(&raw.provider) {
                problems.push(format!(
                    "{key}.provider: no provider named `{}` is configured",
                    raw.provider
                ));
            }
            if raw.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
                problems.push(format!("{key}.model: must not be blank"));
            }
            for (index, field) in raw.public.iter().enumerate() {
                if !(field.pointer.is_empty() || field.pointer.starts_with('/')) {
                    problems.push(format!(
                        "{key}.public[{index}].pointer: `{}` is not a JSON pointer (it must start with /)",
                        field.pointer
                    ));
                }
            }
            if raw.questions.is_empty() {
                problems.push(format!(
                    "{key}.questions: a contract must cover at least one question"
                ));
            }
            let policy = raw.policy.and_then(|policy| {
                build_policy(
                    &format!("{key}.policy"),
                    policy,
                    &raw.questions,
                    &mut problems,
                )
            });
            let mut forward_headers = Vec::new();
            for (index, name) in raw.forward_headers.iter().enumerate() {
                match crate::contract::ForwardHeader::parse(name) {
                    Some(header) if !forward_headers.contains(&header) => {
                        forward_headers.push(header)
                    }
                    Some(_) => problems.push(format!(
                        "{key}.forward_headers[{index}]: `{name}` is listed twice"
                    )),
                    None => problems.push(format!(
                        "{key}.forward_headers[{index}]: `{name}` is not a header a contract can forward (one of: {})",
                        crate::contract::ForwardHeader::ALL
                            .map(|header| header.name())
                            .join(", ")
                    )),
                }
            }
            let mut questions = BTreeMap::new();
            for (id, question) in raw.questions {
                files.extend(question.files(base_dir));
                if let Some(rule) = super::build_question(
                    &format!("{key}.questions.{id}"),
                    question,
                    base_dir,
                    inputs,
                    &mut problems,
                ) {
                    questions.insert(id, rule);
                }
            }
            contracts.insert(
                name.clone(),
                Arc::new(Contract {
                    name,
                    provider: raw.provider,
                    model: raw.model,
                    usage: raw.usage,
                    shape: raw.shape,
                    questions,
                    public: raw.public,
                    policy,
                    forward_headers,
                }),
            );
        }

        let mut recipients = Vec::new();
        let mut digests = std::collections::BTreeSet::new();
        for (index, raw) in self.recipients.into_iter().enumerate() {
            let key = format!("recipients[{index}]");
            if raw.name.trim().is_empty() {
                problems.push(format!("{key}.name: must not be blank"));
            }
            let Some(digest) = super::parse_sha256_hex(&raw.key_sha256) else {
                problems.push(format!(
                    "{key}.key_sha256: must be 64 hex digits (use `releasegate hash-key`)"
                ));
                continue;
            };
            if !digests.insert(digest) {
                problems.push(format!(
                    "{key}.key_sha256: the same key is bound to two recipients"
                ));
            }
            if raw.contracts.is_empty() {
                problems.push(format!("{key}.contracts: bind at least one contract"));
            }
            for contract in &raw.contracts {
                if !contracts.contains_key(contract) {
                    problems.push(format!("{key}.contracts: no contract named `{contract}`"));
                }
            }
            let rate_limit = raw
                .rate_limit
                .map(|limit| validate_rate_limit(&key, limit, &mut problems));
            let policy = raw.policy.and_then(|policy| {
                if !policy.keep.is_empty() {
                    problems.push(format!(
                        "{key}.policy.keep: KEEP is a contract's; a recipient's policy bounds what it learns (hide, max_recovery_gain)"
                    ));
                }
                build_policy(
                    &format!("{key}.policy"),
                    policy,
                    &BTreeMap::new(),
                    &mut problems,
                )
            });
            recipients.push(Recipient {
                name: raw.name,
                key_sha256: digest,
                contracts: raw.contracts,
                rate_limit,
                policy,
            });
        }

        // One writer per file: two captures (or a capture and the decision log) never share one.
        let mut paths: BTreeMap<&Path, &str> = BTreeMap::new();
        if let Some(super::DecisionSink::File(path)) = decision_log.as_ref().map(|l| l.sink()) {
            paths.insert(path.as_path(), "decision_log.path");
        }
        for (name, capture) in &captures {
            if let Some(other) = paths.insert(capture.path.as_path(), name.as_str()) {
                problems.push(format!(
                    "contracts.{name}.capture.path: {} is already written by {}",
                    capture.path.display(),
                    if other == "decision_log.path" {
                        other.to_string()
                    } else {
                        format!("contracts.{other}.capture")
                    }
                ));
            }
        }

        let subjects = crate::certificate::subjects(&contracts, &recipients);
        // The certificates are files the configuration names: a reload (and the file watch)
        // reads them again.
        if let Some(dir) = server.certificates() {
            files.extend(
                subjects
                    .iter()
                    .filter_map(|s| s.kind.file_name(&s.name))
                    .map(|name| dir.join(name)),
            );
        }
        let certification = crate::certificate::check(
            server.certification(),
            server.certificates().map(Path::to_path_buf),
            &subjects,
            inputs.codebooks,
            inputs.files,
        );
        if problems.is_empty() {
            Ok(Config {
                certification,
                server,
                providers,
                recipients,
                contracts,
                source,
                decision_log,
                captures,
                rate_limit_store,
                tracing,
                origin: super::Origin {
                    files,
                    ..super::Origin::default()
                },
            })
        } else {
            Err(Error::Invalid(problems))
        }
    }
}

fn validate_server(raw: RawServer, base_dir: &Path, problems: &mut Vec<String>) -> Server {
    let mut parse_addr = |key: &str, text: &str| {
        text.parse::<SocketAddr>().unwrap_or_else(|_| {
            problems.push(format!("server.{key}: `{text}` is not an IP:port address"));
            SocketAddr::from(([127, 0, 0, 1], 0))
        })
    };
    let listen = parse_addr("listen", &raw.listen);
    let admin_listen = parse_addr("admin_listen", &raw.admin_listen);
    if listen.port() != 0 && listen == admin_listen {
        problems.push("server.admin_listen: must differ from server.listen".to_string());
    }
    check_range(
        problems,
        "server.max_body_bytes",
        raw.max_body_bytes,
        limits::BODY_BYTES,
    );
    check_range(
        problems,
        "server.max_upstream_body_bytes",
        raw.max_upstream_body_bytes,
        limits::BODY_BYTES,
    );
    check_range(
        problems,
        "server.max_image_bytes",
        raw.max_image_bytes,
        limits::BODY_BYTES,
    );
    check_range(
        problems,
        "server.max_asset_bytes",
        raw.max_asset_bytes,
        limits::BODY_BYTES,
    );
    check_range(
        problems,
        "server.shutdown_grace_ms",
        raw.shutdown_grace_ms,
        limits::SHUTDOWN_GRACE_MS,
    );
    for (key, value, range) in [
        (
            "server.header_read_timeout_ms",
            raw.header_read_timeout_ms,
            limits::TIMEOUT_MS,
        ),
        (
            "server.body_read_timeout_ms",
            raw.body_read_timeout_ms,
            limits::TIMEOUT_MS,
        ),
        (
            "server.idle_timeout_ms",
            raw.idle_timeout_ms,
            limits::TIMEOUT_MS,
        ),
        (
            "server.drain_delay_ms",
            raw.drain_delay_ms,
            limits::SHUTDOWN_GRACE_MS,
        ),
        (
            "server.watch_interval_ms",
            raw.watch_interval_ms,
            limits::WATCH_INTERVAL_MS,
        ),
        (
            "server.max_connections",
            raw.max_connections,
            limits::MAX_CONNECTIONS,
        ),
        (
            "server.admin_max_connections",
            raw.admin_max_connections,
            limits::MAX_CONNECTIONS,
        ),
    ] {
        check_range(problems, key, value, range);
    }
    let (_, max_worker_threads) = limits::WORKER_THREADS;
    if raw.worker_threads > max_worker_threads {
        problems.push(format!(
            "server.worker_threads: must be between 0 (one per CPU) and {max_worker_threads}"
        ));
    }
    let certificates = match raw.certificates.as_deref() {
        Some(dir) if dir.trim().is_empty() => {
            problems.push("server.certificates: must not be blank".to_string());
            None
        }
        Some(dir) => Some(base_dir.join(dir)),
        None => None,
    };
    if raw.certification != crate::certificate::Mode::Off && raw.certificates.is_none() {
        problems.push(format!(
            "server.certification = \"{}\" needs server.certificates, the directory `releasegate audit --gate --certificate-dir` writes",
            raw.certification.as_str()
        ));
    }
    let (low, high) = limits::MAX_CONNECTIONS;
    let connections = |value: u64| usize::try_from(value.clamp(low, high)).unwrap_or(1);
    Server {
        listen,
        admin_listen,
        max_body_bytes: usize::try_from(raw.max_body_bytes).unwrap_or(usize::MAX),
        max_upstream_body_bytes: usize::try_from(raw.max_upstream_body_bytes).unwrap_or(usize::MAX),
        max_image_bytes: usize::try_from(raw.max_image_bytes).unwrap_or(usize::MAX),
        max_asset_bytes: usize::try_from(raw.max_asset_bytes).unwrap_or(usize::MAX),
        shutdown_grace: Duration::from_millis(raw.shutdown_grace_ms),
        header_read_timeout: Duration::from_millis(raw.header_read_timeout_ms),
        body_read_timeout: Duration::from_millis(raw.body_read_timeout_ms),
        idle_timeout: Duration::from_millis(raw.idle_timeout_ms),
        max_connections: connections(raw.max_connections),
        admin_max_connections: connections(raw.admin_max_connections),
        drain_delay: Duration::from_millis(raw.drain_delay_ms),
        watch_config: raw.watch_config,
        watch_interval: Duration::from_millis(raw.watch_interval_ms),
        worker_threads: usize::try_from(raw.worker_threads.min(max_worker_threads)).unwrap_or(0),
        access_log: raw.access_log,
        certificates,
        certification: raw.certification,
    }
}

fn validate_rate_limit(
    key: &str,
    raw: RawRateLimit,
    problems: &mut Vec<String>,
) -> super::RateLimit {
    let (min, max) = limits::RATE_LIMIT_RPS;
    let rps = raw.requests_per_second;
    if !(rps.is_finite() && (min..=max).contains(&rps)) {
        problems.push(format!(
            "{key}.rate_limit.requests_per_second: must be between {min} and {max}, got {rps}"
        ));
    }
    let rps = if rps.is_finite() {
        rps.clamp(min, max)
    } else {
        1.0
    };
    // Within range, `ceil` is at most 1e6: the cast is exact.
    let burst = raw.burst.unwrap_or(rps.ceil().max(1.0) as u64);
    check_range(
        problems,
        &format!("{key}.rate_limit.burst"),
        burst,
        limits::RATE_LIMIT_BURST,
    );
    let (low, high) = limits::RATE_LIMIT_BURST;
    super::RateLimit {
        requests_per_second: rps,
        burst: u32::try_from(burst.clamp(low, high)).unwrap_or(1),
    }
}

fn validate_decision_log(
    raw: RawDecisionLog,
    base_dir: &Path,
    problems: &mut Vec<String>,
) -> super::DecisionLog {
    check_range(
        problems,
        "decision_log.max_bytes",
        raw.max_bytes,
        limits::DECISION_LOG_MAX_BYTES,
    );
    check_range(
        problems,
        "decision_log.max_files",
        raw.max_files,
        limits::DECISION_LOG_MAX_FILES,
    );
    check_range(
        problems,
        "decision_log.queue_capacity",
        raw.queue_capacity,
        limits::DECISION_LOG_QUEUE,
    );
    let sink = match raw.path.as_str() {
        "stdout" => super::DecisionSink::Stdout,
        "" => {
            problems.push("decision_log.path: must not be empty (a file or \"stdout\")".into());
            super::DecisionSink::Stdout
        }
        // Whether the path is a writable file is the loader's check (it reads the file system).
        path => super::DecisionSink::File(base_dir.join(path)),
    };
    let size = |value: u64, (min, max): (u64, u64)| {
        usize::try_from(value.clamp(min, max)).unwrap_or(usize::MAX)
    };
    super::DecisionLog {
        sink,
        max_bytes: raw.max_bytes.clamp(
            limits::DECISION_LOG_MAX_BYTES.0,
            limits::DECISION_LOG_MAX_BYTES.1,
        ),
        max_files: size(raw.max_files, limits::DECISION_LOG_MAX_FILES),
        queue_capacity: size(raw.queue_capacity, limits::DECISION_LOG_QUEUE),
    }
}

fn validate_capture(
    key: &str,
    raw: RawCapture,
    base_dir: &Path,
    problems: &mut Vec<String>,
) -> super::Capture {
    check_range(
        problems,
        &format!("{key}.max_bytes"),
        raw.max_bytes,
        limits::DECISION_LOG_MAX_BYTES,
    );
    check_range(
        problems,
        &format!("{key}.max_files"),
        raw.max_files,
        limits::DECISION_LOG_MAX_FILES,
    );
    check_range(
        problems,
        &format!("{key}.queue_capacity"),
        raw.queue_capacity,
        limits::DECISION_LOG_QUEUE,
    );
    if !(raw.sample_rate.is_finite() && raw.sample_rate > 0.0 && raw.sample_rate <= 1.0) {
        problems.push(format!(
            "{key}.sample_rate: must be a fraction in (0, 1] (1 keeps every answer), got {}",
            raw.sample_rate
        ));
    }
    if raw.path.trim().is_empty() || raw.path == "stdout" {
        problems.push(format!(
            "{key}.path: must name a file (captured answers never go to stdout)"
        ));
    }
    let size = |value: u64, (min, max): (u64, u64)| {
        usize::try_from(value.clamp(min, max)).unwrap_or(usize::MAX)
    };
    super::Capture {
        path: base_dir.join(&raw.path),
        sample_rate: if raw.sample_rate.is_finite() {
            raw.sample_rate.clamp(0.0, 1.0)
        } else {
            0.0
        },
        max_bytes: raw.max_bytes.clamp(
            limits::DECISION_LOG_MAX_BYTES.0,
            limits::DECISION_LOG_MAX_BYTES.1,
        ),
        max_files: size(raw.max_files, limits::DECISION_LOG_MAX_FILES),
        queue_capacity: size(raw.queue_capacity, limits::DECISION_LOG_QUEUE),
    }
}

fn validate_tracing(raw: RawTracing, problems: &mut Vec<String>) -> Option<super::Tracing> {
    let endpoint = raw.otlp_endpoint?;
    let n_problems = problems.len();
    let otlp_endpoint = match plain_base_url(&endpoint) {
        Ok(url) => url,
        Err(reason) => {
            problems.push(format!("tracing.otlp_endpoint: {reason}"));
            String::new()
        }
    };
    if raw.service_name.is_empty()
        || raw.service_name.len() > 64
        || !raw
            .service_name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        problems.push("tracing.service_name: 1 to 64 of A-Z a-z 0-9 - _ .".to_string());
    }
    (problems.len() == n_problems).then_some(super::Tracing {
        otlp_endpoint,
        service_name: raw.service_name,
    })
}

fn validate_rate_limit_store(
    raw: RawRateLimitStore,
    env: Option<EnvLookup<'_>>,
    problems: &mut Vec<String>,
) -> Option<super::RateLimitStore> {
    let RawRateLimitStore::Redis {
        url,
        password_env,
        timeout_ms,
        retry_interval_ms,
        key_prefix,
    } = raw;
    let n_problems = problems.len();
    let url = match plain_redis_url(&url) {
        Ok(url) => url,
        Err(reason) => {
            problems.push(format!("rate_limit_store.url: {reason}"));
            String::new()
        }
    };
    check_range(
        problems,
        "rate_limit_store.timeout_ms",
        timeout_ms,
        limits::STORE_TIMEOUT_MS,
    );
    check_range(
        problems,
        "rate_limit_store.retry_interval_ms",
        retry_interval_ms,
        limits::STORE_RETRY_INTERVAL_MS,
    );
    if key_prefix.is_empty()
        || key_prefix.len() > 64
        || !key_prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
    {
        problems.push("rate_limit_store.key_prefix: 1 to 64 of A-Z a-z 0-9 - _ . :".to_string());
    }
    let password = match (password_env, env) {
        (None, _) | (_, None) => None,
        (Some(var), Some(env)) => match env(&var) {
            Some(value) if !value.is_empty() => Some(SecretString::from(value)),
            _ => {
                problems.push(format!(
                    "rate_limit_store.password_env: environment variable `{var}` is not set"
                ));
                None
            }
        },
    };
    (problems.len() == n_problems).then(|| super::RateLimitStore {
        url,
        password,
        timeout: Duration::from_millis(timeout_ms),
        retry_interval: Duration::from_millis(retry_interval_ms),
        key_prefix,
    })
}

/// A Redis URL the proxy connects to: `redis://host[:port][/db]` only. No credentials (the
/// password comes from `password_env`, so a ConfigMap never holds it), no TLS (`rediss://`
/// is not built in), no query or fragment.
fn plain_redis_url(text: &str) -> Result<String, String> {
    let url = url::Url::parse(text).map_err(|error| format!("`{text}` is not a URL: {error}"))?;
    if url.scheme() == "rediss" {
        return Err(format!(
            "`{text}`: TLS (rediss://) is not supported; use redis:// on a trusted network"
        ));
    }
    if url.scheme() != "redis" {
        return Err(format!("`{text}` must start with redis://"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "`{text}` must not contain a user name or password; set password_env"
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("`{text}` names no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("`{text}` must not have a query or fragment"));
    }
    let db = url.path().trim_start_matches('/');
    if !db.is_empty() && db.parse::<u16>().is_err() {
        return Err(format!("`{text}`: the path must be a database number"));
    }
    Ok(url.to_string())
}

fn validate_provider(
    name: &str,
    raw: RawProvider,
    env: Option<EnvLookup<'_>>,
    problems: &mut Vec<String>,
) -> Option<Provider> {
    let key = format!("providers.{name}");
    match raw {
        RawProvider::Simulated {} => Some(Provider::Simulated),
        RawProvider::Systemone {
            base_url,
            api_key_env,
            timeout_ms,
            max_concurrency,
            queue_timeout_ms,
        } => {
            let n_problems = problems.len();
            let base_url = match plain_base_url(&base_url) {
                Ok(url) => url,
                Err(reason) => {
                    problems.push(format!("{key}.base_url: {reason}"));
                    String::new()
                }
            };
            check_range(
                problems,
                &format!("{key}.timeout_ms"),
                timeout_ms,
                limits::TIMEOUT_MS,
            );
            check_range(
                problems,
                &format!("{key}.queue_timeout_ms"),
                queue_timeout_ms,
                limits::QUEUE_TIMEOUT_MS,
            );
            check_range(
                problems,
                &format!("{key}.max_concurrency"),
                max_concurrency,
                limits::MAX_CONCURRENCY,
            );
            let api_key = match (api_key_env, env) {
                (None, _) | (_, None) => None,
                (Some(var), Some(env)) => match env(&var) {
                    // Sent as `Authorization: Bearer KEY`: anything but visible ASCII would
                    // make every request fail, so it is a configuration error here.
                    Some(value) if !value.trim().bytes().all(|b| b.is_ascii_graphic()) => {
                        problems.push(format!(
                            "{key}.api_key_env: environment variable `{var}` holds characters \
                             that cannot go in an HTTP header"
                        ));
                        None
                    }
                    Some(value) if !value.trim().is_empty() => {
                        Some(SecretString::from(value.trim().to_string()))
                    }
                    _ => {
                        problems.push(format!(
                            "{key}.api_key_env: environment variable `{var}` is not set"
                        ));
                        None
                    }
                },
            };
            (problems.len() == n_problems).then(|| {
                Provider::SystemOne(RemoteProvider {
                    base_url,
                    api_key,
                    timeout: Duration::from_millis(timeout_ms),
                    queue_timeout: Duration::from_millis(queue_timeout_ms.min(timeout_ms)),
                    max_concurrency: usize::try_from(max_concurrency).unwrap_or(usize::MAX),
                })
            })
        }
    }
}

/// Parses a provider's base URL and returns it without a trailing slash. Only a plain
/// `http(s)://host[:port][/path]` is accepted: no user name or password (`a@b` would send the
/// provider key to host `b`), no query or fragment, and it must already be in the normalized
/// form the HTTP client will use, so what the operator reads is where requests go.
fn plain_base_url(text: &str) -> Result<String, String> {
    let url = url::Url::parse(text).map_err(|error| format!("`{text}` is not a URL: {error}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("`{text}` must start with http:// or https://"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "`{text}` must not contain a user name or password (`...@`); \
             the provider key comes from api_key_env"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "`{text}` must not have a query (`?`) or fragment (`#`)"
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("`{text}` has no host"));
    }
    if url.port() == Some(0) {
        return Err(format!("`{text}` has port 0"));
    }
    let normalized = url.as_str().trim_end_matches('/');
    if normalized != text.trim_end_matches('/') {
        return Err(format!(
            "`{text}` is not a plain base URL; write it as `{normalized}`"
        ));
    }
    Ok(normalized.to_string())
}
