//! Configuration: TOML text (plus whatever overrides the caller merges into
//! the figment), extracted into raw structs and validated into typed config.
//!
//! Validation never touches the file system or the process environment: the
//! caller hands it [`Inputs`], a reader of the files the configuration names
//! (codebooks, model files) and a lookup of provider keys. The proxy crate's
//! loader supplies the real ones. Every error names the key and the reason.

mod outputs;
mod providers;
mod questions;
mod raw;
mod recipients;
mod server;
mod summary;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use figment::Figment;
use figment::providers::{Format, Toml};

use crate::contract::Contract;

pub use outputs::{Capture, DecisionLog, DecisionSink, RateLimitStore, Tracing};
pub use providers::{Circuit, Provider, RemoteProvider};
pub(crate) use questions::build_question;
pub use raw::unloaded::UnloadedCodebook;
pub use raw::{RawConfig, limits};
pub use recipients::{RateLimit, Recipient};
pub use server::{AUTO_BUDGET_BYTES, Server};

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
    pub(crate) server: Server,
    /// Providers by name.
    pub(crate) providers: BTreeMap<String, Provider>,
    /// Recipients, each with its key digest and bound contracts.
    pub(crate) recipients: Vec<Recipient>,
    /// Contracts by name.
    pub(crate) contracts: BTreeMap<String, Arc<Contract>>,
    /// Where the configuration came from (for messages).
    pub(crate) source: String,
    /// The file and the files it names: what a reload re-reads and `watch_config` watches.
    pub(crate) origin: Origin,
    /// `[decision_log]`: where one JSON line per request goes (`None`: off). Fixed at start.
    pub(crate) decision_log: Option<DecisionLog>,
    /// `contracts.NAME.capture`, by contract name: live capture of native answers (worlds
    /// format). Fixed at start, like the decision log.
    pub(crate) captures: BTreeMap<String, Capture>,
    /// `[rate_limit_store]`: where the recipients' rate limits are kept so that every replica
    /// sharing it enforces them together (`None`: each replica on its own).
    pub(crate) rate_limit_store: Option<RateLimitStore>,
    /// `[tracing]`: where spans are exported (`None`: nowhere). Fixed at start.
    pub(crate) tracing: Option<Tracing>,
    /// Every contract and recipient with a policy and its certificate's status
    /// (`[server] certificates`, `docs/gate.md`).
    pub(crate) certification: crate::certificate::Certification,
    /// The WCPQ questions whose codebooks were not loaded (`Inputs::codebooks` false; empty
    /// otherwise): such a configuration is never served.
    pub(crate) unloaded_codebooks: Vec<UnloadedCodebook>,
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
        config.origin.sha256 = crate::workflow::sha256_hex(text.as_bytes());
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

    /// Listener and limit settings.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// Providers by name.
    pub fn providers(&self) -> &BTreeMap<String, Provider> {
        &self.providers
    }

    /// Recipients, each with its key digest and bound contracts.
    pub fn recipients(&self) -> &[Recipient] {
        &self.recipients
    }

    /// Contracts by name.
    pub fn contracts(&self) -> &BTreeMap<String, Arc<Contract>> {
        &self.contracts
    }

    /// Where the configuration came from (for messages).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The file and the files it names: what a reload re-reads and `watch_config` watches.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// `[decision_log]`: where one JSON line per request goes (`None`: off). Fixed at start.
    pub fn decision_log(&self) -> Option<&DecisionLog> {
        self.decision_log.as_ref()
    }

    /// `contracts.NAME.capture`, by contract name: live capture of native answers (worlds
    /// format). Fixed at start, like the decision log.
    pub fn captures(&self) -> &BTreeMap<String, Capture> {
        &self.captures
    }

    /// `[rate_limit_store]`: where the recipients' rate limits are kept so that every replica
    /// sharing it enforces them together (`None`: each replica on its own).
    pub fn rate_limit_store(&self) -> Option<&RateLimitStore> {
        self.rate_limit_store.as_ref()
    }

    /// `[tracing]`: where spans are exported (`None`: nowhere). Fixed at start.
    pub fn tracing(&self) -> Option<&Tracing> {
        self.tracing.as_ref()
    }

    /// Every contract and recipient with a policy and its certificate's status
    /// (`[server] certificates`, `docs/gate.md`).
    pub fn certification(&self) -> &crate::certificate::Certification {
        &self.certification
    }

    /// The same configuration, recorded as read from `path` (`None`: the embedded default or
    /// a string) whose text had the SHA-256 (hex) `sha256`: what [`Origin`] reports.
    pub fn read_from(mut self, path: Option<PathBuf>, sha256: String) -> Config {
        self.origin.path = path;
        self.origin.sha256 = sha256;
        self
    }

    /// The same configuration served on other listeners (tests start the shipped
    /// configuration on `127.0.0.1:0`).
    #[cfg(feature = "test-support")]
    pub fn with_listeners(
        mut self,
        listen: std::net::SocketAddr,
        admin_listen: std::net::SocketAddr,
    ) -> Config {
        self.server = self.server.with_listeners(listen, admin_listen);
        self
    }

    /// The WCPQ questions whose codebooks were not loaded (empty for a configuration loaded
    /// to be served).
    pub fn unloaded_codebooks(&self) -> &[UnloadedCodebook] {
        &self.unloaded_codebooks
    }

    /// The contract named `name`.
    pub fn contract(&self, name: &str) -> Option<&Arc<Contract>> {
        self.contracts.get(name)
    }
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
