//! releasegate: a release-sanitizing proxy for typed decision APIs.
//!
//! # Layout
//!
//! Pure core (synchronous, deterministic, no tokio/axum/reqwest):
//! - `contract`: the typed release contract (views, coarsening, withholding).
//! - `wire`: checking requests and parsing System One answers into class vectors.
//! - `mechanism`: release mechanisms that rewrite probability/confidence fields.
//! - `dataset`: one contract question's native answers out of saved worlds.
//! - `release`: applies a contract to a whole response; the one code path
//!   shared by the proxy and the offline replay.
//! - `workflow`: frozen downstream workflows, plans and behaviour signatures.
//! - `features`: public request features taken from `state` by JSON pointer.
//! - `codebook`: the WCPQ codebook builder and artifact.
//! - `wcpq`: the strict WCPQ mapper.
//! - `baseline`: baseline mechanisms (quantize, top-k, temperature, Gaussian noise).
//! - `simulate`: the TUPLE-like world generator and the simulated provider.
//! - `worlds`: the saved decision log format (JSON Lines).
//! - `rng`: deterministic random numbers.
//!
//! - `audit`: the leakage audit's statistics (decoders, ensembles, bootstrap, report, SVG).
//!
//! Edges (IO):
//! - `config`: figment loading and validation into typed config.
//! - `auth`: recipient keys.
//! - `ratelimit`: per-recipient token buckets.
//! - `upstream`: providers (remote System One over reqwest, or the simulator).
//! - `server`: the axum application, handlers and errors.
//! - `metrics`: the Prometheus registry and handles.
//! - `decisions`: the release decision log (writer, rotation) and its summary.
//! - `replay`: the offline replay of a contract over a worlds file.
//! - `cli`: the `releasegate` subcommands.
//! - `telemetry`: logging set-up.

pub mod audit;
pub mod auth;
pub mod baseline;
pub mod cli;
pub mod codebook;
pub mod config;
pub mod contract;
pub mod dataset;
pub mod decisions;
pub mod features;
pub mod mechanism;
pub mod metrics;
pub mod ratelimit;
pub mod release;
pub mod replay;
pub mod rng;
pub mod server;
pub mod simulate;
pub mod telemetry;
pub mod upstream;
pub mod wcpq;
pub mod wire;
pub mod workflow;
pub mod worlds;
