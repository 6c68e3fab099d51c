pub mod auth;
pub mod decisions;
pub mod load;
pub(crate) mod metrics;
pub(crate) mod ratelimit;
pub mod server;
pub mod telemetry;
pub(crate) mod upstream;
