//! Where the proxy writes beyond its answers, as validated: the release decision log, live
//! captures of native answers, trace export and the shared rate limit store.

use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::SecretString;

/// `[tracing] otlp_endpoint = "http://..."`: OTLP over HTTP (protobuf) span export (built by
/// validation only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracing {
    pub(super) otlp_endpoint: String,
    pub(super) service_name: String,
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
    pub(super) path: PathBuf,
    pub(super) sample_rate: f64,
    pub(super) max_bytes: u64,
    pub(super) max_files: usize,
    pub(super) queue_capacity: usize,
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
    pub(super) url: String,
    pub(super) password: Option<SecretString>,
    pub(super) timeout: Duration,
    pub(super) retry_interval: Duration,
    pub(super) key_prefix: String,
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
    pub(super) sink: DecisionSink,
    pub(super) max_bytes: u64,
    pub(super) max_files: usize,
    pub(super) queue_capacity: usize,
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
