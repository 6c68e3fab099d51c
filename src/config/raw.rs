//! The configuration as read, before validation.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use serde::Deserialize;

use super::{Config, EnvLookup, Error, Provider, Recipient, RemoteProvider, Server};
use crate::contract::{Contract, Usage, View};
use crate::mechanism;

/// The whole file.
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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawServer {
    listen: String,
    admin_listen: String,
    max_body_bytes: u64,
    max_upstream_body_bytes: u64,
    shutdown_grace_ms: u64,
    header_read_timeout_ms: u64,
    body_read_timeout_ms: u64,
    idle_timeout_ms: u64,
    max_connections: u64,
    admin_max_connections: u64,
    drain_delay_ms: u64,
    worker_threads: u64,
    access_log: bool,
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
    Simulated,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecipient {
    name: String,
    key_sha256: String,
    contracts: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawContract {
    provider: String,
    model: Option<String>,
    #[serde(default = "default_usage")]
    usage: Usage,
    #[serde(default)]
    questions: BTreeMap<String, RawQuestion>,
    #[serde(default)]
    public: Vec<crate::contract::PublicField>,
}

/// One `[contracts.NAME.questions.ID]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQuestion {
    pub(crate) classes: Vec<String>,
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

/// Upper bound of `max_connections` and `admin_max_connections` (far above any
/// file-descriptor limit a single process gets).
const MAX_CONNECTIONS_LIMIT: u64 = 1_000_000;

/// Upper bound of `worker_threads`.
const MAX_WORKER_THREADS: u64 = 1024;

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
            shutdown_grace_ms: 10_000,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            max_connections: 10_000,
            admin_max_connections: 64,
            drain_delay_ms: 0,
            worker_threads: 0,
            access_log: true,
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
        mode: &super::Mode<'_>,
    ) -> Result<Config, Error> {
        let mut problems = Vec::new();
        let server = validate_server(self.server, &mut problems);

        let mut providers = BTreeMap::new();
        for (name, raw) in self.providers {
            if let Some(provider) = validate_provider(&name, raw, mode.env, &mut problems) {
                providers.insert(name, provider);
            }
        }

        let mut contracts = BTreeMap::new();
        for (name, raw) in self.contracts {
            let key = format!("contracts.{name}");
            if !providers.contains_key(&raw.provider) {
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
            let mut questions = BTreeMap::new();
            for (id, question) in raw.questions {
                if let Some(rule) = super::build_question(
                    &format!("{key}.questions.{id}"),
                    question,
                    base_dir,
                    mode,
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
                    questions,
                    public: raw.public,
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
            recipients.push(Recipient {
                name: raw.name,
                key_sha256: digest,
                contracts: raw.contracts,
            });
        }

        if problems.is_empty() {
            Ok(Config {
                server,
                providers,
                recipients,
                contracts,
                source,
            })
        } else {
            Err(Error::Invalid(problems))
        }
    }
}

fn validate_server(raw: RawServer, problems: &mut Vec<String>) -> Server {
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
    if raw.max_body_bytes == 0 {
        problems.push("server.max_body_bytes: must be greater than 0".to_string());
    }
    if raw.max_upstream_body_bytes == 0 {
        problems.push("server.max_upstream_body_bytes: must be greater than 0".to_string());
    }
    for (key, value) in [
        ("header_read_timeout_ms", raw.header_read_timeout_ms),
        ("body_read_timeout_ms", raw.body_read_timeout_ms),
        ("idle_timeout_ms", raw.idle_timeout_ms),
    ] {
        if value == 0 {
            problems.push(format!("server.{key}: must be greater than 0"));
        }
    }
    for (key, value) in [
        ("max_connections", raw.max_connections),
        ("admin_max_connections", raw.admin_max_connections),
    ] {
        if !(1..=MAX_CONNECTIONS_LIMIT).contains(&value) {
            problems.push(format!(
                "server.{key}: must be between 1 and {MAX_CONNECTIONS_LIMIT}"
            ));
        }
    }
    if raw.worker_threads > MAX_WORKER_THREADS {
        problems.push(format!(
            "server.worker_threads: must be between 0 (one per core) and {MAX_WORKER_THREADS}"
        ));
    }
    let connections =
        |value: u64| usize::try_from(value.clamp(1, MAX_CONNECTIONS_LIMIT)).unwrap_or(1);
    Server {
        listen,
        admin_listen,
        max_body_bytes: usize::try_from(raw.max_body_bytes).unwrap_or(usize::MAX),
        max_upstream_body_bytes: usize::try_from(raw.max_upstream_body_bytes).unwrap_or(usize::MAX),
        shutdown_grace: Duration::from_millis(raw.shutdown_grace_ms),
        header_read_timeout: Duration::from_millis(raw.header_read_timeout_ms),
        body_read_timeout: Duration::from_millis(raw.body_read_timeout_ms),
        idle_timeout: Duration::from_millis(raw.idle_timeout_ms),
        max_connections: connections(raw.max_connections),
        admin_max_connections: connections(raw.admin_max_connections),
        drain_delay: Duration::from_millis(raw.drain_delay_ms),
        worker_threads: usize::try_from(raw.worker_threads.min(MAX_WORKER_THREADS)).unwrap_or(0),
        access_log: raw.access_log,
    }
}

fn validate_provider(
    name: &str,
    raw: RawProvider,
    env: Option<EnvLookup<'_>>,
    problems: &mut Vec<String>,
) -> Option<Provider> {
    let key = format!("providers.{name}");
    match raw {
        RawProvider::Simulated => Some(Provider::Simulated),
        RawProvider::Systemone {
            base_url,
            api_key_env,
            timeout_ms,
            max_concurrency,
            queue_timeout_ms,
        } => {
            let n_problems = problems.len();
            let trimmed = base_url.trim_end_matches('/').to_string();
            match reqwest_free_url_check(&trimmed) {
                Ok(()) => {}
                Err(reason) => problems.push(format!("{key}.base_url: {reason}")),
            }
            if timeout_ms == 0 {
                problems.push(format!("{key}.timeout_ms: must be greater than 0"));
            }
            if max_concurrency == 0 {
                problems.push(format!("{key}.max_concurrency: must be greater than 0"));
            }
            let api_key = match (api_key_env, env) {
                (None, _) | (_, None) => None,
                (Some(var), Some(env)) => match env(&var) {
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
                    base_url: trimmed,
                    api_key,
                    timeout: Duration::from_millis(timeout_ms),
                    queue_timeout: Duration::from_millis(queue_timeout_ms.min(timeout_ms)),
                    max_concurrency: usize::try_from(max_concurrency).unwrap_or(usize::MAX),
                })
            })
        }
    }
}

/// Checks the URL shape without pulling the HTTP client into configuration.
fn reqwest_free_url_check(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| format!("`{url}` must start with http:// or https://"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("`{url}` has no host"));
    }
    if rest.contains(['?', '#', ' ']) {
        return Err(format!(
            "`{url}` must not contain a query, fragment or space"
        ));
    }
    Ok(())
}
