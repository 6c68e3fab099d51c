//! `[server]` as validated: listeners, body and connection limits, timeouts, reload and
//! certification settings, fixed at start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Listener and limit settings. They are fixed at start: a reload that changes them is
/// refused (`Server::changed_keys`). Only validation builds one, so every value is within
/// its range (`limits`); the fields are read through their methods.
///
/// Each field serializes under its configuration key (`server.KEY`), durations in
/// milliseconds: that serialization is what a reload compares, so a key added here is
/// fixed at start without a second list.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Server {
    pub(super) listen: SocketAddr,
    pub(super) admin_listen: SocketAddr,
    pub(super) max_body_bytes: usize,
    pub(super) max_upstream_body_bytes: usize,
    pub(super) max_image_bytes: usize,
    pub(super) max_asset_bytes: usize,
    pub(super) max_decoded_bytes_in_flight: Option<usize>,
    #[serde(rename = "decoded_bytes_queue_timeout_ms", serialize_with = "millis")]
    pub(super) decoded_bytes_queue_timeout: Duration,
    #[serde(rename = "shutdown_grace_ms", serialize_with = "millis")]
    pub(super) shutdown_grace: Duration,
    #[serde(rename = "header_read_timeout_ms", serialize_with = "millis")]
    pub(super) header_read_timeout: Duration,
    #[serde(rename = "body_read_timeout_ms", serialize_with = "millis")]
    pub(super) body_read_timeout: Duration,
    #[serde(rename = "idle_timeout_ms", serialize_with = "millis")]
    pub(super) idle_timeout: Duration,
    pub(super) max_connections: usize,
    pub(super) admin_max_connections: usize,
    #[serde(rename = "drain_delay_ms", serialize_with = "millis")]
    pub(super) drain_delay: Duration,
    pub(super) watch_config: bool,
    #[serde(rename = "watch_interval_ms", serialize_with = "millis")]
    pub(super) watch_interval: Duration,
    pub(super) worker_threads: usize,
    pub(super) access_log: bool,
    pub(super) certificates: Option<PathBuf>,
    pub(super) certification: crate::certificate::Mode,
}

/// The range of the derived budget on request bytes (`server.max_decoded_bytes_in_flight`
/// unset): 64 MiB to 256 MiB.
pub const AUTO_BUDGET_BYTES: (u64, u64) = (64 << 20, 256 << 20);

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

    /// The process-wide budget on the bytes requests hold (`server.max_decoded_bytes_in_flight`)
    /// as configured; `None`: derived from the memory limit ([`Server::decoded_bytes_budget`]).
    pub fn max_decoded_bytes_in_flight(&self) -> Option<usize> {
        self.max_decoded_bytes_in_flight
    }

    /// The budget on the bytes requests hold: `server.max_decoded_bytes_in_flight`, or
    /// without it an eighth of `memory_limit` (the process's memory limit in bytes, read by
    /// the caller: cgroup v2 `memory.max`, else the machine's memory), clamped to
    /// [`AUTO_BUDGET_BYTES`]; the low end when the limit is unknown.
    pub fn decoded_bytes_budget(&self, memory_limit: Option<u64>) -> usize {
        if let Some(bytes) = self.max_decoded_bytes_in_flight {
            return bytes;
        }
        let (low, high) = AUTO_BUDGET_BYTES;
        let eighth = memory_limit.map_or(low, |bytes| bytes / 8);
        usize::try_from(eighth.clamp(low, high)).unwrap_or(usize::MAX)
    }

    /// How long a request waits for its share of the budget before it is refused (503).
    pub fn decoded_bytes_queue_timeout(&self) -> Duration {
        self.decoded_bytes_queue_timeout
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
