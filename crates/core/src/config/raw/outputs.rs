//! The sections that say where the proxy writes beyond its answers, checked: `[decision_log]`,
//! `contracts.NAME.capture`, `[tracing]` and `[rate_limit_store]`.

use std::path::Path;
use std::time::Duration;

use secrecy::SecretString;

use super::providers::plain_base_url;
use super::{RawCapture, RawDecisionLog, RawRateLimitStore, RawTracing, check_range, limits};
use crate::config::EnvLookup;

pub(super) fn validate_decision_log(
    raw: RawDecisionLog,
    base_dir: &Path,
    problems: &mut Vec<String>,
) -> crate::config::DecisionLog {
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
        "stdout" => crate::config::DecisionSink::Stdout,
        "" => {
            problems.push("decision_log.path: must not be empty (a file or \"stdout\")".into());
            crate::config::DecisionSink::Stdout
        }
        // Whether the path is a writable file is the loader's check (it reads the file system).
        path => crate::config::DecisionSink::File(base_dir.join(path)),
    };
    let size = |value: u64, (min, max): (u64, u64)| {
        usize::try_from(value.clamp(min, max)).unwrap_or(usize::MAX)
    };
    crate::config::DecisionLog {
        sink,
        max_bytes: raw.max_bytes.clamp(
            limits::DECISION_LOG_MAX_BYTES.0,
            limits::DECISION_LOG_MAX_BYTES.1,
        ),
        max_files: size(raw.max_files, limits::DECISION_LOG_MAX_FILES),
        queue_capacity: size(raw.queue_capacity, limits::DECISION_LOG_QUEUE),
    }
}

pub(super) fn validate_capture(
    key: &str,
    raw: RawCapture,
    base_dir: &Path,
    problems: &mut Vec<String>,
) -> crate::config::Capture {
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
    crate::config::Capture {
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

pub(super) fn validate_tracing(
    raw: RawTracing,
    problems: &mut Vec<String>,
) -> Option<crate::config::Tracing> {
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
    (problems.len() == n_problems).then_some(crate::config::Tracing {
        otlp_endpoint,
        service_name: raw.service_name,
    })
}

pub(super) fn validate_rate_limit_store(
    raw: RawRateLimitStore,
    env: Option<EnvLookup<'_>>,
    problems: &mut Vec<String>,
) -> Option<crate::config::RateLimitStore> {
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
    (problems.len() == n_problems).then(|| crate::config::RateLimitStore {
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
