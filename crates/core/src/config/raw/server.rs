//! `[server]` checked: addresses, ranges and the certification directory, into a `Server`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{RawServer, check_range, limits};
use crate::config::Server;

pub(super) fn validate_server(
    raw: RawServer,
    base_dir: &Path,
    problems: &mut Vec<String>,
) -> Server {
    let (listen, admin_listen) = listeners(&raw, problems);
    check_ranges(&raw, problems);
    let (_, max_worker_threads) = limits::WORKER_THREADS;
    if raw.worker_threads > max_worker_threads {
        problems.push(format!(
            "server.worker_threads: must be between 0 (one per CPU) and {max_worker_threads}"
        ));
    }
    let certificates = certificates(&raw, base_dir, problems);
    let (low, high) = limits::MAX_CONNECTIONS;
    let connections = |value: u64| usize::try_from(value.clamp(low, high)).unwrap_or(1);
    Server {
        listen,
        admin_listen,
        max_body_bytes: usize::try_from(raw.max_body_bytes).unwrap_or(usize::MAX),
        max_upstream_body_bytes: usize::try_from(raw.max_upstream_body_bytes).unwrap_or(usize::MAX),
        max_image_bytes: usize::try_from(raw.max_image_bytes).unwrap_or(usize::MAX),
        max_asset_bytes: usize::try_from(raw.max_asset_bytes).unwrap_or(usize::MAX),
        max_decoded_bytes_in_flight: raw
            .max_decoded_bytes_in_flight
            .map(|bytes| usize::try_from(bytes).unwrap_or(usize::MAX)),
        decoded_bytes_queue_timeout: Duration::from_millis(raw.decoded_bytes_queue_timeout_ms),
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

/// `listen` and `admin_listen`: two different IP:port addresses.
fn listeners(raw: &RawServer, problems: &mut Vec<String>) -> (SocketAddr, SocketAddr) {
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
    (listen, admin_listen)
}

/// Every numeric key within its range (`limits`).
fn check_ranges(raw: &RawServer, problems: &mut Vec<String>) {
    if let Some(bytes) = raw.max_decoded_bytes_in_flight {
        check_range(
            problems,
            "server.max_decoded_bytes_in_flight",
            bytes,
            limits::DECODED_BYTES_IN_FLIGHT,
        );
    }
    for (key, value, range) in [
        (
            "server.max_body_bytes",
            raw.max_body_bytes,
            limits::BODY_BYTES,
        ),
        (
            "server.max_upstream_body_bytes",
            raw.max_upstream_body_bytes,
            limits::BODY_BYTES,
        ),
        (
            "server.max_image_bytes",
            raw.max_image_bytes,
            limits::BODY_BYTES,
        ),
        (
            "server.max_asset_bytes",
            raw.max_asset_bytes,
            limits::BODY_BYTES,
        ),
        (
            "server.decoded_bytes_queue_timeout_ms",
            raw.decoded_bytes_queue_timeout_ms,
            limits::QUEUE_TIMEOUT_MS,
        ),
        (
            "server.shutdown_grace_ms",
            raw.shutdown_grace_ms,
            limits::SHUTDOWN_GRACE_MS,
        ),
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
}

/// `certificates`: the directory, resolved against the configuration's, that certification
/// other than `off` needs.
fn certificates(raw: &RawServer, base_dir: &Path, problems: &mut Vec<String>) -> Option<PathBuf> {
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
    certificates
}
