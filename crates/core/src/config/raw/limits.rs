//! Inclusive ranges of the numeric keys. Whatever validation accepts must also start and
//! serve: these keep every value far from the limits of what uses it (tokio's semaphore,
//! timers, buffers) and catch typos such as an extra three zeros.

/// `server.max_body_bytes`, `server.max_upstream_body_bytes`, `server.max_image_bytes`,
/// `server.max_asset_bytes`: 1 byte to 1 GiB.
pub const BODY_BYTES: (u64, u64) = (1, 1 << 30);
/// `server.max_decoded_bytes_in_flight`: 1 MiB to 1 TiB (the budget counts in KiB).
pub const DECODED_BYTES_IN_FLIGHT: (u64, u64) = (1 << 20, 1 << 40);
/// `recipients[].max_in_flight`: 1 to 100,000 requests at once.
pub const MAX_IN_FLIGHT: (u64, u64) = (1, 100_000);
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
/// The levels of a score question: 2 to 10 (the System One API's documented limit; a
/// provider that keeps to it refuses every request asking more).
pub const SCORE_LEVELS: (usize, usize) = (2, 10);
/// `contracts.*.questions.*.workflows.costs`: the largest cost magnitude (profiles
/// double costs and plans sum them: every sum stays finite).
pub const MAX_COST: f64 = 1e12;
