//! releasegate's HTTP proxy: every socket, file and environment variable on the serving side.
//!
//! - [`server`]: the public and admin listeners, handlers, errors, reload.
//! - [`load`]: reading the configuration file, the environment and the files it names.
//! - [`auth`]: recipient keys; rate limits and providers are internal to the server.
//! - [`demo`]: the embedded demo's published keys stay on loopback.
//! - [`decisions`]: the release decision log and its summary.
//! - [`collect`]: asking a contract's provider for native answers (`releasegate collect`).
//! - `capture`: live capture of sampled native answers as worlds (internal to the server).
//! - [`telemetry`]: logging set-up.

pub mod auth;
pub(crate) mod cache;
pub(crate) mod capture;
pub(crate) mod clock;
pub mod collect;
pub(crate) mod cpus;
pub mod decisions;
pub mod demo;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub(crate) mod http1;
pub mod load;
pub mod memory;
pub(crate) mod metrics;
pub(crate) mod otel;
pub(crate) mod ratelimit;
pub mod server;
pub mod telemetry;
pub(crate) mod upstream;

/// This build's version and source commit: `releasegate VERSION (COMMIT)`, as
/// `releasegate_build_info` labels it (certificates record it).
pub fn build_version() -> String {
    format!(
        "releasegate {} ({})",
        env!("CARGO_PKG_VERSION"),
        metrics::BUILD_COMMIT
    )
}
