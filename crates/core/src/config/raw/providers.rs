//! `[providers.NAME]` checked: the base URL, ranges and the provider key from the environment.

use std::time::Duration;

use secrecy::SecretString;

use super::{RawCircuit, RawProvider, check_range, limits};
use crate::config::{Circuit, EnvLookup, Provider, RemoteProvider};

pub(super) fn validate_provider(
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
            circuit,
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
            let circuit = circuit.and_then(|raw| build_circuit(&key, &raw, problems));
            let api_key = api_key(&key, api_key_env, env, problems);
            (problems.len() == n_problems).then(|| {
                Provider::SystemOne(RemoteProvider {
                    base_url,
                    api_key,
                    timeout: Duration::from_millis(timeout_ms),
                    queue_timeout: Duration::from_millis(queue_timeout_ms.min(timeout_ms)),
                    max_concurrency: usize::try_from(max_concurrency).unwrap_or(usize::MAX),
                    circuit,
                })
            })
        }
    }
}

/// `circuit = { failures, window_ms, cooldown_ms }`: 1 to 10,000 failures, windows and
/// cooldowns of 1 ms to one hour.
fn build_circuit(key: &str, raw: &RawCircuit, problems: &mut Vec<String>) -> Option<Circuit> {
    let before = problems.len();
    check_range(
        problems,
        &format!("{key}.circuit.failures"),
        raw.failures,
        (1, 10_000),
    );
    for (name, value) in [
        ("window_ms", raw.window_ms),
        ("cooldown_ms", raw.cooldown_ms),
    ] {
        check_range(
            problems,
            &format!("{key}.circuit.{name}"),
            value,
            (1, 3_600_000),
        );
    }
    (problems.len() == before).then(|| Circuit {
        failures: u32::try_from(raw.failures).unwrap_or(u32::MAX),
        window: Duration::from_millis(raw.window_ms),
        cooldown: Duration::from_millis(raw.cooldown_ms),
    })
}

/// The provider key, read from the variable `api_key_env` names (offline tools read none).
fn api_key(
    key: &str,
    api_key_env: Option<String>,
    env: Option<EnvLookup<'_>>,
    problems: &mut Vec<String>,
) -> Option<SecretString> {
    match (api_key_env, env) {
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
    }
}

/// Parses a provider's base URL and returns it without a trailing slash. Only a plain
/// `http(s)://host[:port][/path]` is accepted: no user name or password (`a@b` would send the
/// provider key to host `b`), no query or fragment, and it must already be in the normalized
/// form the HTTP client will use, so what the operator reads is where requests go.
pub(super) fn plain_base_url(text: &str) -> Result<String, String> {
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
