//! releasegate: a release-sanitizing proxy for typed decision APIs.
//!
//! # Layout
//!
//! Pure core (synchronous, deterministic, no tokio/axum/reqwest):
//! - `contract`: the typed release contract (views, coarsening, withholding).
//! - `mechanism`: release mechanisms that rewrite probability/confidence fields.
//! - `answer`: parsing and validating System One answers into class vectors.
//! - `release`: applies a contract to a whole response; the one code path
//!   shared by the proxy and the offline replay.
//! - `rng`: deterministic random numbers.
//!
//! Edges (IO):
//! - `config`: figment loading and validation into typed config.
//! - `auth`: recipient keys.
//! - `upstream`: providers (remote System One over reqwest, or the simulator).
//! - `server`: the axum application, handlers and errors.
//! - `metrics`: the Prometheus registry and handles.
//! - `cli`: the `releasegate` subcommands.

pub mod config;
pub mod contract;
pub mod mechanism;
pub mod release;
pub mod rng;
pub mod wire;
