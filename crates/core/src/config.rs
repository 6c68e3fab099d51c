//! Configuration: TOML text (plus whatever overrides the caller merges into
//! the figment), extracted into raw structs and validated into typed config.
//!
//! Validation never touches the file system or the process environment: the
//! caller hands it [`Inputs`], a reader of the files the configuration names
//! (codebooks, model files) and a lookup of provider keys. The proxy crate's
//! loader supplies the real ones. Every error names the key and the reason.

mod raw;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Toml};
use secrecy::SecretString;

use crate::contract::{Coarsening, Contract, Pinned, QuestionRule, View};
use crate::mechanism::Mechanism;
use crate::wire::Kind;
use crate::workflow::{Spec, sha256_hex};

pub use raw::{RawConfig, limits};

/// Prefix of environment overrides (`RELEASEGATE_SERVER__LISTEN=...`).
pub const ENV_PREFIX: &str = "RELEASEGATE_";

/// Largest workflow cost (`c_wrong`, `c_review`, `c_check`, matrix entries) a contract may set.
pub const MAX_COST: f64 = limits::MAX_COST;

/// Reads an environment variable (injected so tests never mutate the process environment).
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads a file the configuration names (a path already resolved against the
/// configuration's directory).
pub type ReadFile<'a> = &'a dyn Fn(&Path) -> std::io::Result<Vec<u8>>;

/// What validation may read of the outside world, supplied by the caller.
#[derive(Clone, Copy)]
pub struct Inputs<'a> {
    /// Reads provider keys; `None` for offline tools (keys are not read, and an
    /// unset key variable is no error).
    pub env: Option<EnvLookup<'a>>,
    /// Reads codebooks and model files.
    pub files: ReadFile<'a>,
    /// Loads and checks WCPQ codebooks. Without them WCPQ questions come back
    /// with the mechanism `none`: for building the codebook a contract will
    /// name, never for serving.
    pub codebooks: bool,
}

/// Configuration errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file or an override could not be read or has the wrong shape.
    #[error("{0}")]
    Load(String),
    /// The configuration has the right shape but breaks a rule.
    #[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
}

/// The validated configuration.
#[derive(Debug)]
pub struct Config {
    /// Listener and limit settings.
    pub server: Server,
    /// Providers by name.
    pub providers: BTreeMap<String, Provider>,
    /// Recipients, each with its key digest and bound contracts.
    pub recipients: Vec<Recipient>,
    /// Contracts by name.
    pub contracts: BTreeMap<String, Arc<Contract>>,
    /// Where the configuration came from (for messages).
    pub source: String,
    /// The file and the files it names: what a reload re-reads and `watch_config` watches.
    pub origin: Origin,
    /// `[decision_log]`: where one JSON line per request goes (`None`: off). Fixed at start.
    pub decision_log: Option<DecisionLog>,
    /// `contracts.NAME.capture`, by contract name: live capture of native answers (worlds
    /// format). Fixed at start, like the decision log.
    pub captures: BTreeMap<String, Capture>,
    /// `[rate_limit_store]`: where the recipients' rate limits are kept so that every replica
    /// sharing it enforces them together (`None`: each replica on its own).
    pub rate_limit_store: Option<RateLimitStore>,
    /// `[tracing]`: where spans are exported (`None`: nowhere). Fixed at start.
    pub tracing: Option<Tracing>,
    /// Every contract and recipient with a policy and its certificate's status
    /// (`[server] certificates`, `docs/gate.md`).
    pub certification: crate::certificate::Certification,
}

/// `[tracing] otlp_endpoint = "http://..."`: OTLP over HTTP (protobuf) span export (built by
/// validation only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracing {
    otlp_endpoint: String,
    service_name: String,
}

impl Tracing {
    /// The collector's base URL, without a trailing slash; spans go to `{it}/v1/traces`.
    pub fn otlp_endpoint(&self) -> &str {
        &self.otlp_endpoint
    }
    /// The `service.name` resource attribute.
    pub fn service_name(&self) -> &str {
        &self.service_name
    }
}

/// A contract's live capture (`contracts.NAME.capture`, built by validation only): a sample of
/// its native answers, with the requests that went upstream, appended to a worlds file.
#[derive(Debug, Clone, PartialEq)]
pub struct Capture {
    path: PathBuf,
    sample_rate: f64,
    max_bytes: u64,
    max_files: usize,
    queue_capacity: usize,
}

impl Capture {
    /// The worlds file (resolved against the configuration's directory).
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The fraction of released answers kept, in (0, 1].
    pub fn sample_rate(&self) -> f64 {
        self.sample_rate
    }
    /// A file is rotated before it would grow beyond this many bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }
    /// Rotated files kept (`PATH.1` newest .. `PATH.N` oldest).
    pub fn max_files(&self) -> usize {
        self.max_files
    }
    /// Worlds waiting for the writer; beyond it they are dropped and counted.
    pub fn queue_capacity(&self) -> usize {
        self.queue_capacity
    }
}

/// `[rate_limit_store] kind = "redis"`: a Redis server holding every recipient's token bucket
/// (built by validation only: every value is in its range, the URL is a plain
/// `redis://host[:port][/db]` without credentials).
#[derive(Debug, Clone)]
pub struct RateLimitStore {
    url: String,
    password: Option<SecretString>,
    timeout: Duration,
    retry_interval: Duration,
    key_prefix: String,
}

impl RateLimitStore {
    /// `redis://host[:port][/db]`, without credentials (safe to print).
    pub fn url(&self) -> &str {
        &self.url
    }
    /// The password (Redis `AUTH`), read from the variable `password_env` names.
    pub fn password(&self) -> Option<&SecretString> {
        self.password.as_ref()
    }
    /// Longest wait for one call to the store (connecting included); beyond it the request
    /// is limited on this replica alone.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
    /// After a failed call, how long a replica keeps its limits to itself before it asks the
    /// store again.
    pub fn retry_interval(&self) -> Duration {
        self.retry_interval
    }
    /// Prefix of the store's keys (`PREFIX:rl:...`): deployments sharing one Redis use
    /// different prefixes.
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }
}

/// The release decision log's settings (built by validation only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionLog {
    sink: DecisionSink,
    max_bytes: u64,
    max_files: usize,
    queue_capacity: usize,
}

impl DecisionLog {
    /// Where the lines go.
    pub fn sink(&self) -> &DecisionSink {
        &self.sink
    }
    /// A file is rotated before it would grow beyond this many bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }
    /// Rotated files kept (`PATH.1` newest .. `PATH.N` oldest).
    pub fn max_files(&self) -> usize {
        self.max_files
    }
    /// Lines waiting for the writer; beyond it lines are dropped and counted.
    pub fn queue_capacity(&self) -> usize {
        self.queue_capacity
    }
}

/// The release decision log's destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecisionSink {
    /// Standard output (the operational log is on standard error).
    Stdout,
    /// A file, rotated by size (resolved against the configuration's directory).
    File(PathBuf),
}

/// Where a configuration came from.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// The configuration file (`None`: the embedded default or a string).
    pub path: Option<PathBuf>,
    /// SHA-256 (hex) of the configuration text as read, before environment overrides:
    /// `sha256sum` of the file (the `releasegate_config_info` label).
    pub sha256: String,
    /// The files the configuration names (WCPQ codebooks, logistic posterior models, the
    /// certificates of its policies), resolved against the configuration's directory.
    pub files: Vec<PathBuf>,
}

/// Listener and limit settings. They are fixed at start: a reload that changes them is
/// refused (`Server::changed_keys`). Only validation builds one, so every value is within
/// its range (`limits`); the fields are read through their methods.
///
/// Each field serializes under its configuration key (`server.KEY`), durations in
/// milliseconds: that serialization is what a reload compares, so a key added here is
/// fixed at start without a second list.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Server {
    listen: SocketAddr,
    admin_listen: SocketAddr,
    max_body_bytes: usize,
    max_upstream_body_bytes: usize,
    max_image_bytes: usize,
    max_asset_bytes: usize,
    #[serde(rename = "shutdown_grace_ms", serialize_with = "millis")]
    shutdown_grace: Duration,
    #[serde(rename = "header_read_timeout_ms", serialize_with = "millis")]
    header_read_timeout: Duration,
    #[serde(rename = "body_read_timeout_ms", serialize_with = "millis")]
    body_read_timeout: Duration,
    #[serde(rename = "idle_timeout_ms", serialize_with = "millis")]
    idle_timeout: Duration,
    max_connections: usize,
    admin_max_connections: usize,
    #[serde(rename = "drain_delay_ms", serialize_with = "millis")]
    drain_delay: Duration,
    watch_config: bool,
    #[serde(rename = "watch_interval_ms", serialize_with = "millis")]
    watch_interval: Duration,
    worker_threads: usize,
    access_log: bool,
    certificates: Option<PathBuf>,
    certification: crate::certificate::Mode,
}

fn millis<S: serde::Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u128(duration.as_millis())
}

impl Server {
    /// Public listener (System One endpoints).
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }
    /// Admin listener (metrics and health).
    pub fn admin_listen(&self) -> SocketAddr {
        self.admin_listen
    }
    /// The same settings on other listeners (tests and tools that bind elsewhere, such as
    /// `127.0.0.1:0`).
    #[cfg(feature = "test-support")]
    pub fn with_listeners(mut self, listen: SocketAddr, admin_listen: SocketAddr) -> Server {
        self.listen = listen;
        self.admin_listen = admin_listen;
        self
    }
    /// The certificates directory (`server.certificates`, resolved against the
    /// configuration's directory).
    pub fn certificates(&self) -> Option<&Path> {
        self.certificates.as_deref()
    }
    /// What serving does with an uncertified contract or recipient.
    pub fn certification(&self) -> crate::certificate::Mode {
        self.certification
    }
    /// Largest accepted request body, before and after decompression.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }
    /// Largest accepted upstream response body.
    pub fn max_upstream_body_bytes(&self) -> usize {
        self.max_upstream_body_bytes
    }

    /// Most bytes of one image of a request (`server.max_image_bytes`).
    pub fn max_image_bytes(&self) -> usize {
        self.max_image_bytes
    }

    /// Most bytes of all a request's images together (`server.max_asset_bytes`), besides
    /// `max_body_bytes` for its JSON.
    pub fn max_asset_bytes(&self) -> usize {
        self.max_asset_bytes
    }

    /// The images' limits, as the wire format's asset check takes them.
    pub fn asset_limits(&self) -> crate::wire::assets::Limits {
        crate::wire::assets::Limits {
            max_image_bytes: self.max_image_bytes,
            max_asset_bytes: self.max_asset_bytes,
        }
    }
    /// How long shutdown waits for in-flight requests.
    pub fn shutdown_grace(&self) -> Duration {
        self.shutdown_grace
    }
    /// A request head must arrive within this time of its first byte (of accepting the
    /// connection, for the first request).
    pub fn header_read_timeout(&self) -> Duration {
        self.header_read_timeout
    }
    /// A request body must arrive completely within this time (a total deadline from the
    /// start of reading, not per chunk); 408 beyond.
    pub fn body_read_timeout(&self) -> Duration {
        self.body_read_timeout
    }
    /// A keep-alive connection with no request in progress is closed after this long.
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }
    /// Most open connections on the public listener; more are closed at once.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }
    /// Most open connections on the admin listener (its own budget).
    pub fn admin_max_connections(&self) -> usize {
        self.admin_max_connections
    }
    /// On shutdown, `/readyz` answers 503 for this long before the public listener stops
    /// accepting.
    pub fn drain_delay(&self) -> Duration {
        self.drain_delay
    }
    /// Reload when the configuration file or a file it names changes (besides SIGHUP).
    pub fn watch_config(&self) -> bool {
        self.watch_config
    }
    /// How often `watch_config` looks at the files.
    pub fn watch_interval(&self) -> Duration {
        self.watch_interval
    }
    /// Event-loop threads serving the public listener, each a single-threaded runtime with
    /// its own accept loop and upstream connections; 0 is one per available CPU (see
    /// [`Server::event_loops`]).
    pub fn worker_threads(&self) -> usize {
        self.worker_threads
    }
    /// One log line per request (target `releasegate::access`, written in batches).
    pub fn access_log(&self) -> bool {
        self.access_log
    }

    /// How many event loops serve the public listener: `worker_threads`, or with 0
    /// `available`, the CPUs the process may use (the caller reads them: the proxy's
    /// `cpus` follows the cgroup's CPU quota, rounded up), at least 1.
    pub fn event_loops(&self, available: usize) -> usize {
        match self.worker_threads {
            0 => available.max(1),
            n => n,
        }
    }

    /// The `[server]` keys (`server.KEY`) whose values differ between the two settings:
    /// they are bound into the listeners and the drain at start, so a reload may not
    /// change them. Derived from the fields' own serialization, so no key is forgotten.
    pub fn changed_keys(&self, other: &Server) -> Vec<String> {
        match (serde_json::to_value(self), serde_json::to_value(other)) {
            (Ok(serde_json::Value::Object(old)), Ok(serde_json::Value::Object(new))) => old
                .iter()
                .filter(|(key, value)| new.get(*key) != Some(value))
                .map(|(key, _)| format!("server.{key}"))
                .collect(),
            _ if self == other => Vec::new(),
            _ => vec!["server".to_string()],
        }
    }
}

/// A provider that answers System One requests.
#[derive(Debug)]
pub enum Provider {
    /// A remote System One endpoint.
    SystemOne(RemoteProvider),
    /// The in-process deterministic simulator (no network, no key).
    Simulated,
}

/// A remote System One provider (built by validation only: every value is in its range).
#[derive(Debug)]
pub struct RemoteProvider {
    base_url: String,
    api_key: Option<SecretString>,
    timeout: Duration,
    max_concurrency: usize,
    queue_timeout: Duration,
}

impl RemoteProvider {
    /// Root URL; `/v1/systemone` and `/v1/models` are appended.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
    /// The provider key, read from the environment at load time.
    pub fn api_key(&self) -> Option<&SecretString> {
        self.api_key.as_ref()
    }
    /// Per-request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
    /// Most requests in flight to this provider at once (within `limits::MAX_CONCURRENCY`,
    /// far below what a semaphore can hold).
    pub fn max_concurrency(&self) -> usize {
        self.max_concurrency
    }
    /// How long a request waits for a free slot before it is shed with 503 (at most
    /// `timeout`).
    pub fn queue_timeout(&self) -> Duration {
        self.queue_timeout
    }
}

/// A caller identified by its key.
#[derive(Debug, Clone)]
pub struct Recipient {
    /// The recipient's name (for logs).
    pub name: String,
    /// SHA-256 of its key.
    pub key_sha256: [u8; 32],
    /// The contracts the key is bound to.
    pub contracts: Vec<String>,
    /// Its request rate limit (on this replica, or across replicas with
    /// `[rate_limit_store]`), if any.
    pub rate_limit: Option<RateLimit>,
    /// Its leakage budget over everything its contracts release together (`audit --recipient
    /// NAME --gate`); never read by the proxy at request time.
    pub policy: Option<crate::contract::LeakagePolicy>,
}

/// A token bucket: `burst` requests at once, refilled at `requests_per_second` (built by
/// validation only: both are in their ranges).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    requests_per_second: f64,
    burst: u32,
}

impl RateLimit {
    /// A rate limit, if both values are in their ranges (`limits::RATE_LIMIT_RPS`,
    /// `limits::RATE_LIMIT_BURST`).
    pub fn new(requests_per_second: f64, burst: u32) -> Option<RateLimit> {
        let (low, high) = limits::RATE_LIMIT_RPS;
        let (min, max) = limits::RATE_LIMIT_BURST;
        ((low..=high).contains(&requests_per_second) && (min..=max).contains(&u64::from(burst)))
            .then_some(RateLimit {
                requests_per_second,
                burst,
            })
    }

    /// Sustained rate (`limits::RATE_LIMIT_RPS`).
    pub fn requests_per_second(&self) -> f64 {
        self.requests_per_second
    }
    /// Bucket size (`limits::RATE_LIMIT_BURST`).
    pub fn burst(&self) -> u32 {
        self.burst
    }
}

// === impl Config ===

impl Config {
    /// Parses and validates TOML text; `base_dir` resolves the relative paths it names.
    pub fn from_toml_with(
        text: &str,
        source: &str,
        base_dir: &Path,
        inputs: Inputs<'_>,
    ) -> Result<Config, Error> {
        let mut config = Config::from_figment(
            Figment::from(Toml::string(text)),
            source.to_string(),
            base_dir,
            inputs,
        )?;
        config.origin.sha256 = sha256_hex(text.as_bytes());
        Ok(config)
    }

    /// Extracts and validates a figment (TOML plus whatever overrides the caller merged).
    pub fn from_figment(
        figment: Figment,
        source: String,
        base_dir: &Path,
        inputs: Inputs<'_>,
    ) -> Result<Config, Error> {
        let raw: RawConfig = figment.extract().map_err(|error| {
            let reasons: Vec<String> = error.into_iter().map(describe_figment_error).collect();
            Error::Load(format!(
                "cannot read configuration ({source}): {}",
                reasons.join("; ")
            ))
        })?;
        raw.validate(source, base_dir, &inputs)
    }

    /// The contract named `name`.
    pub fn contract(&self, name: &str) -> Option<&Arc<Contract>> {
        self.contracts.get(name)
    }

    /// A short human summary (printed by `check-config`).
    pub fn summary(&self) -> String {
        let mut out = format!(
            "configuration OK ({})\nlisten {} · admin {} · max body {} bytes\n",
            self.source, self.server.listen, self.server.admin_listen, self.server.max_body_bytes
        );
        out.push_str(&format!(
            "connections: public {} · admin {} · header {} ms · body {} ms · idle {} ms · drain delay {} ms · grace {} ms · worker threads {} · access log {}\n",
            self.server.max_connections,
            self.server.admin_max_connections,
            self.server.header_read_timeout.as_millis(),
            self.server.body_read_timeout.as_millis(),
            self.server.idle_timeout.as_millis(),
            self.server.drain_delay.as_millis(),
            self.server.shutdown_grace.as_millis(),
            match self.server.worker_threads {
                0 => "one per CPU (the CPU quota rounded up, else the cores)".to_string(),
                n => n.to_string(),
            },
            if self.server.access_log { "on" } else { "off" },
        ));
        out.push_str(&format!(
            "reload: SIGHUP{} · sha256 {}\n",
            if self.server.watch_config {
                format!(
                    ", and file changes (checked every {} ms)",
                    self.server.watch_interval.as_millis()
                )
            } else {
                String::new()
            },
            self.origin.sha256,
        ));
        match &self.tracing {
            None => out.push_str("traces: not exported\n"),
            Some(tracing) => out.push_str(&format!(
                "traces: OTLP/HTTP to {}/v1/traces as {}\n",
                tracing.otlp_endpoint, tracing.service_name
            )),
        }
        match &self.rate_limit_store {
            None => out.push_str("rate limits: per replica\n"),
            Some(store) => out.push_str(&format!(
                "rate limits: shared through redis {} (prefix {}, timeout {} ms, password {}); per replica while it is unreachable\n",
                store.url,
                store.key_prefix,
                store.timeout.as_millis(),
                if store.password.is_some() { "set" } else { "none" },
            )),
        }
        out.push_str(&self.certification.summary());
        match &self.decision_log {
            None => out.push_str("decision log: off\n"),
            Some(log) => out.push_str(&format!(
                "decision log: {} · queue {}\n",
                match &log.sink {
                    DecisionSink::Stdout => "stdout".to_string(),
                    DecisionSink::File(path) => format!(
                        "{} (rotated at {} bytes, {} files kept)",
                        path.display(),
                        log.max_bytes,
                        log.max_files
                    ),
                },
                log.queue_capacity
            )),
        }
        for (name, capture) in &self.captures {
            out.push_str(&format!(
                "capture {name}: {} · sample rate {} · rotated at {} bytes, {} files kept · queue {}\n",
                capture.path.display(),
                capture.sample_rate,
                capture.max_bytes,
                capture.max_files,
                capture.queue_capacity
            ));
        }
        for (name, provider) in &self.providers {
            match provider {
                Provider::Simulated => out.push_str(&format!("provider {name}: simulated\n")),
                Provider::SystemOne(remote) => out.push_str(&format!(
                    "provider {name}: systemone {} (timeout {} ms, concurrency {}, key {})\n",
                    remote.base_url,
                    remote.timeout.as_millis(),
                    remote.max_concurrency,
                    if remote.api_key.is_some() {
                        "set"
                    } else {
                        "none"
                    }
                )),
            }
        }
        for recipient in &self.recipients {
            out.push_str(&format!(
                "recipient {}: contracts {}{}\n",
                recipient.name,
                recipient.contracts.join(", "),
                match recipient.rate_limit {
                    Some(limit) => format!(
                        " · rate limit {}/s, burst {} (per replica)",
                        limit.requests_per_second, limit.burst
                    ),
                    None => String::new(),
                }
            ));
        }
        for (name, contract) in &self.contracts {
            out.push_str(&format!(
                "contract {name}: provider {}, usage {:?}, shape {}\n",
                contract.provider, contract.usage, contract.shape
            ));
            for (question, rule) in &contract.questions {
                let options = if rule.question.kind == Kind::Box {
                    "a box".to_string()
                } else {
                    format!("{} classes", rule.classes.len())
                };
                out.push_str(&format!(
                    "  question {question}: {options}, view {}, mechanism {}{}{}\n",
                    rule.view,
                    rule.mechanism.kind(),
                    if rule.coarsen.is_some() {
                        ", coarsened"
                    } else {
                        ""
                    },
                    if rule.withhold.iter().any(|w| *w) {
                        ", withholding"
                    } else {
                        ""
                    },
                ));
                out.push_str(&format!(
                    "    asks a {} question, {}\n",
                    rule.question.kind.as_str(),
                    if rule.question.caller_text {
                        "with the caller's instructions and descriptions (caller_text)".to_string()
                    } else {
                        let described = rule.question.descriptions.iter().flatten().count();
                        let instructions = if rule.question.instructions.is_some() {
                            "instructions"
                        } else {
                            "no instructions"
                        };
                        if rule.question.kind == Kind::Box {
                            format!("pinned: {instructions}")
                        } else {
                            format!(
                                "pinned: {instructions}, {described} of {} options described",
                                rule.classes.len()
                            )
                        }
                    }
                ));
                if let crate::mechanism::Mechanism::Wcpq(wcpq) = &rule.mechanism {
                    out.push_str(&format!(
                        "    wcpq fallback {}: {}\n",
                        wcpq.fallback.as_str(),
                        wcpq.fallback.disclosure(contract.shape)
                    ));
                    if let Some(effect) = wcpq.fallback.typed_clients(contract.shape) {
                        out.push_str(&format!("    typed clients: {effect}\n"));
                    }
                }
            }
        }
        for warning in self.warnings() {
            out.push_str(&format!("warning: {warning}\n"));
        }
        out
    }

    /// In `advisory` certification, one warning per contract or recipient served without a
    /// certificate for what it releases (logged at start and at every reload).
    pub fn certification_warnings(&self) -> Vec<String> {
        if self.certification.mode() != crate::certificate::Mode::Advisory {
            return Vec::new();
        }
        self.certification
            .uncertified()
            .map(|entry| {
                format!(
                    "{} {} is served uncertified: {} (server.certification = \"advisory\")",
                    entry.kind.as_str(),
                    entry.name,
                    entry.status.describe()
                )
            })
            .collect()
    }

    /// Settings that weaken a contract on purpose, each naming its key (printed by
    /// `check-config` and logged at start-up): a live capture (it stores native answers), a
    /// question whose text the caller writes, and a baseline that releases the provider's own
    /// confidence.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = self.certification_warnings();
        for (name, capture) in &self.captures {
            warnings.push(format!(
                "contracts.{name}.capture: {} stores a sample ({}) of this contract's native answers \
                 with the requests that produced them (state included): the very answers the contract \
                 releases only in part. The file is created with mode 0600; keep it, its rotations \
                 and any copies to the people who may read native answers",
                capture.path.display(),
                capture.sample_rate
            ));
        }
        for (name, contract) in &self.contracts {
            if let Some(why) = usage_keep_risk(contract) {
                warnings.push(format!(
                    "contracts.{name}.usage = \"keep\": the provider's output_tokens goes out unchanged, \
                     and it follows what the model wrote (a longer label, a longer answer) although {why}; \
                     two releases that differ only in output_tokens can tell apart what the release \
                     hides. Use usage = \"input\" (input_tokens only) or \"drop\""
                ));
            }
            for (id, rule) in &contract.questions {
                let key = format!("contracts.{name}.questions.{id}");
                if rule.question.caller_text {
                    warnings.push(format!(
                        "{key}.caller_text = true: the caller writes this question's instructions and \
                         descriptions, so it can give any label any meaning (swap two labels, ask a \
                         yes/no question about anything); the audit and the gate report it as not certifiable"
                    ));
                }
                if rule.question.kind == Kind::Box {
                    warnings.push(format!(
                        "{key}: a box question; its edges can carry what the contract hides (where \
                         in the image the model looked), the audit does not read them, and the gate \
                         reports the contract as not certifiable; quantize with a coarse step, or \
                         release view = \"choice\" to drop the confidence"
                    ));
                }
                if rule.mechanism.confidence_source()
                    == Some(crate::mechanism::ConfidenceSource::Native)
                {
                    warnings.push(format!(
                        "{key}.mechanism.confidence = \"native\": the provider's confidence goes out at \
                         full precision beside the rewritten probabilities (under Jev's definition it \
                         gives the native top probability back); for audits that replicate the paper's \
                         baselines, not for serving"
                    ));
                }
            }
        }
        warnings
    }
}

/// Why `usage = "keep"` undoes part of `contract` (`None` when it keeps usage otherwise, or
/// releases every question in full): a question that coarsens, withholds, uses a mechanism or
/// releases less than `full_native`.
fn usage_keep_risk(contract: &Contract) -> Option<String> {
    if !contract.usage.keeps() {
        return None;
    }
    contract.questions.iter().find_map(|(id, rule)| {
        let why = if rule.coarsen.is_some() {
            "it coarsens"
        } else if rule.withhold.iter().any(|w| *w) {
            "it withholds labels"
        } else if !matches!(rule.mechanism, Mechanism::None) {
            "it rewrites the answer with a mechanism"
        } else if rule.view != View::FullNative {
            "its view releases less than full_native"
        } else {
            return None;
        };
        Some(format!("question {id}: {why}"))
    })
}

/// Whether an environment key (prefix stripped, levels joined by `.`) targets a top-level key of
/// the configuration. `RELEASEGATE_SECTION__KEY=value` overrides are read only for such keys:
/// others with the prefix (Kubernetes injects `RELEASEGATE_PORT`, `RELEASEGATE_SERVICE_HOST`, ...
/// for a Service named `releasegate`) are not configuration. Within a section, unknown keys are
/// still errors naming the key.
pub fn is_config_env_key(key: &str) -> bool {
    let top = key.split('.').next().unwrap_or_default();
    raw::sections()
        .iter()
        .any(|section| section.eq_ignore_ascii_case(top))
}

fn describe_figment_error(error: figment::Error) -> String {
    let key = error.path.join(".");
    let kind = error.kind.to_string();
    let origin = error
        .metadata
        .as_ref()
        .map(|metadata| format!(" (from {})", metadata.name))
        .unwrap_or_default();
    if key.is_empty() {
        format!("{kind}{origin}")
    } else {
        format!("key `{key}`{origin}: {kind}")
    }
}

pub(crate) fn build_question(
    key: &str,
    mut raw: raw::RawQuestion,
    base_dir: &Path,
    inputs: &Inputs<'_>,
    problems: &mut Vec<String>,
) -> Option<QuestionRule> {
    if raw.kind == Some(Kind::Box) {
        return build_box_question(key, raw, problems);
    }
    let n_problems = problems.len();
    let classes = std::mem::take(&mut raw.classes);
    let (min_classes, max_classes) = limits::CLASSES;
    if !(min_classes..=max_classes).contains(&classes.len()) {
        problems.push(format!(
            "{key}.classes: needs {min_classes} to {max_classes} classes, got {}",
            classes.len()
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for class in &classes {
        if class.trim().is_empty() {
            problems.push(format!("{key}.classes: a class label is blank"));
        }
        if !seen.insert(class.as_str()) {
            problems.push(format!("{key}.classes: `{class}` is listed twice"));
        }
    }
    if raw.view == View::NoOutput {
        // Typed clients read every asked question's answer (Python `answers[id]`, the JS
        // SDK's types): an allowed question that releases nothing breaks them. The
        // audit's candidate views still include `no_output` (`Contract::with_release`).
        problems.push(format!(
            "{key}.view: `no_output` on a question the contract allows leaves its answer out, which typed clients cannot read; remove the question from the contract instead (asking it is then 403 `question_not_released`)"
        ));
    }
    let question = pin_question(key, &raw, &classes, problems);
    let coarsen = if raw.coarsen.is_empty() {
        None
    } else {
        if question.kind != Kind::Choice {
            problems.push(format!(
                "{key}.coarsen: applies to choice questions only (this one is {})",
                question.kind.as_str()
            ));
        }
        for fine in raw.coarsen.keys() {
            if !classes.contains(fine) {
                problems.push(format!("{key}.coarsen: `{fine}` is not one of the classes"));
            }
        }
        let mut labels: Vec<String> = Vec::new();
        let mut map = Vec::with_capacity(classes.len());
        for class in &classes {
            let coarse = raw.coarsen.get(class).unwrap_or(class);
            let index = match labels.iter().position(|label| label == coarse) {
                Some(index) => index,
                None => {
                    labels.push(coarse.clone());
                    labels.len() - 1
                }
            };
            map.push(index);
        }
        if labels.len() < 2 {
            problems.push(format!(
                "{key}.coarsen: leaves fewer than two released labels"
            ));
        }
        Some(Coarsening { labels, map })
    };
    let released: &[String] = coarsen.as_ref().map_or(&classes, |c| &c.labels);
    let mut withhold = vec![false; released.len()];
    for label in &raw.withhold_labels {
        match released.iter().position(|l| l == label) {
            Some(index) => withhold[index] = true,
            None => problems.push(format!(
                "{key}.withhold_labels: `{label}` is not a released label"
            )),
        }
    }
    if let Some(costs) = raw.workflows.as_ref().and_then(|w| w.costs.as_ref()) {
        // Profiles double costs and plans sum them: keep every sum finite.
        let values = [costs.c_wrong, costs.c_review, costs.c_check];
        let matrix = costs.matrix.iter().flatten().flatten().copied();
        if values
            .into_iter()
            .flatten()
            .chain(matrix)
            .any(|v| v.abs() > MAX_COST)
        {
            problems.push(format!(
                "{key}.workflows.costs: every cost must be at most {MAX_COST:e}"
            ));
        }
    }
    if problems.len() > n_problems {
        return None;
    }
    let workflows = match &raw.workflows {
        None => None,
        Some(table) => match Spec::from_raw(table, released, base_dir, inputs.files) {
            Ok(spec) => Some(spec),
            Err(error) => {
                problems.push(format!("{key}.workflows.{error}"));
                None
            }
        },
    };
    let raw_mechanism = match raw.mechanism {
        crate::mechanism::Raw::Wcpq { .. } if !inputs.codebooks => crate::mechanism::Raw::None,
        other => other,
    };
    let mechanism = match Mechanism::from_raw(
        raw_mechanism,
        released,
        workflows.as_ref(),
        base_dir,
        inputs.files,
    ) {
        Ok(mechanism) => mechanism,
        Err(reason) => {
            problems.push(format!("{key}.mechanism: {reason}"));
            Mechanism::None
        }
    };
    (problems.len() == n_problems).then_some(QuestionRule {
        classes,
        question,
        view: raw.view,
        coarsen,
        withhold,
        mechanism,
        workflows,
        pinned_upstream: Default::default(),
    })
}

/// A `type = "box"` question: no classes, labels or workflows; the view `full_native` (box
/// and confidence) or `choice` (the box alone); no mechanism, or `quantize` (edges and
/// confidence rounded to its step).
fn build_box_question(
    key: &str,
    raw: raw::RawQuestion,
    problems: &mut Vec<String>,
) -> Option<QuestionRule> {
    let n_problems = problems.len();
    let mut refuse = |field: &str, present: bool| {
        if present {
            problems.push(format!(
                "{key}.{field}: a box question has no classes, so no `{field}`"
            ));
        }
    };
    refuse("classes", !raw.classes.is_empty());
    refuse("descriptions", !raw.descriptions.is_empty());
    refuse("coarsen", !raw.coarsen.is_empty());
    refuse("withhold_labels", !raw.withhold_labels.is_empty());
    refuse("workflows", raw.workflows.is_some());
    match raw.view {
        View::FullNative | View::Choice => {}
        View::NoOutput => problems.push(format!(
            "{key}.view: `no_output` on a question the contract allows leaves its answer out, which typed clients cannot read; remove the question from the contract instead (asking it is then 403 `question_not_released`)"
        )),
        other => problems.push(format!(
            "{key}.view: a box question is released as `full_native` (box and confidence) or `choice` (the box alone), not `{}`",
            other.as_str()
        )),
    }
    let mechanism = match raw.mechanism {
        crate::mechanism::Raw::None => Mechanism::None,
        crate::mechanism::Raw::Quantize {
            step,
            confidence: crate::mechanism::ConfidenceSource::Derived,
        } if crate::baseline::step_nanos(step).is_some() => Mechanism::Quantize {
            step,
            confidence: crate::mechanism::ConfidenceSource::Derived,
        },
        crate::mechanism::Raw::Quantize { step, confidence } => {
            problems.push(format!(
                "{key}.mechanism: a box question's quantize takes a `step` (a decimal in [1e-9, 1] with at most 9 decimal places, got {step}) and rounds the confidence to it{}",
                if confidence == crate::mechanism::ConfidenceSource::Derived {
                    ""
                } else {
                    " (no `confidence` option)"
                }
            ));
            Mechanism::None
        }
        _ => {
            problems.push(format!(
                "{key}.mechanism: a box question takes no mechanism or `{{ kind = \"quantize\", step = ... }}` (the others rewrite class probabilities, which a box has none of)"
            ));
            Mechanism::None
        }
    };
    if let Some(instructions) = &raw.instructions {
        content(format!("{key}.instructions"), instructions, problems);
    }
    (problems.len() == n_problems).then(|| QuestionRule {
        classes: Vec::new(),
        question: Pinned {
            kind: Kind::Box,
            instructions: raw.instructions,
            descriptions: Vec::new(),
            caller_text: raw.caller_text,
        },
        view: raw.view,
        coarsen: None,
        withhold: Vec::new(),
        mechanism,
        workflows: None,
        pinned_upstream: Default::default(),
    })
}

/// The question a contract asks: its type (declared, or implied by the classes: `"false"`
/// and `"true"` make a noul question, the levels `"0".."N-1"` a score question, anything
/// else a choice question) and its text.
fn pin_question(
    key: &str,
    raw: &raw::RawQuestion,
    classes: &[String],
    problems: &mut Vec<String>,
) -> Pinned {
    let is_noul = {
        let mut sorted: Vec<&str> = classes.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        sorted == ["false", "true"]
    };
    let is_score = crate::wire::is_level_permutation(classes);
    let kind = match raw.kind {
        Some(Kind::Noul) if !is_noul => {
            problems.push(format!(
                "{key}.type: a noul question's classes must be \"false\" and \"true\""
            ));
            Kind::Noul
        }
        Some(Kind::Score) if !is_score => {
            problems.push(format!(
                "{key}.type: a score question's classes must be its levels \"0\"..\"{}\"",
                classes.len().saturating_sub(1)
            ));
            Kind::Score
        }
        Some(kind) => kind,
        None if is_noul => Kind::Noul,
        None if is_score => Kind::Score,
        None => Kind::Choice,
    };
    if let Some(instructions) = &raw.instructions {
        content(format!("{key}.instructions"), instructions, problems);
    }
    for (class, description) in &raw.descriptions {
        if classes.contains(class) {
            content(format!("{key}.descriptions.{class}"), description, problems);
        } else {
            problems.push(format!(
                "{key}.descriptions: `{class}` is not one of the classes ({})",
                classes.join(", ")
            ));
        }
    }
    Pinned {
        kind,
        instructions: raw.instructions.clone(),
        descriptions: classes
            .iter()
            .map(|class| raw.descriptions.get(class).cloned())
            .collect(),
        caller_text: raw.caller_text,
    }
}

/// Checks that a pinned text is System One content: a string (not blank), a table or an array.
fn content(field: String, value: &serde_json::Value, problems: &mut Vec<String>) {
    match value {
        serde_json::Value::String(text) if text.trim().is_empty() => {
            problems.push(format!("{field}: must not be blank"));
        }
        serde_json::Value::String(_)
        | serde_json::Value::Object(_)
        | serde_json::Value::Array(_) => {}
        _ => problems.push(format!(
            "{field}: must be System One content: a string, a table or an array"
        )),
    }
}

/// Parses a 64-digit hex SHA-256.
pub fn parse_sha256_hex(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(text.trim(), &mut out).ok()?;
    Some(out)
}

/// Test-only shortcuts: the process environment and the file system stand in for the
/// inputs the proxy's loader supplies.
#[cfg(test)]
impl Config {
    pub(crate) fn from_toml(text: &str) -> Result<Config, Error> {
        Config::from_toml_with_env(text, &|name| std::env::var(name).ok())
    }

    pub(crate) fn from_toml_with_env(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, Error> {
        Config::from_toml_with(
            text,
            "inline",
            Path::new("."),
            Inputs {
                env: Some(env),
                files: &|path| std::fs::read(path),
                codebooks: true,
            },
        )
    }
}

#[cfg(test)]
mod tests;
