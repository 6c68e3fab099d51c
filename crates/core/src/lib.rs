//! releasegate's pure core: everything the proxy and the offline tools agree on.
//!
//! Synchronous and deterministic. It has no async runtime, HTTP stack or ndarray among its
//! dependencies, and it never reads a file or an environment variable: configuration
//! validation takes [`config::Inputs`] from its caller.
//!
//! - [`contract`]: the typed release contract (views, shapes, coarsening, withholding).
//! - [`wire`]: checking System One requests and parsing answers into class vectors.
//! - [`release`]: applies a contract to a whole response (the one path the proxy and replay share).
//! - [`mechanism`], [`baseline`]: what rewrites the probability and confidence fields.
//! - [`workflow`], [`features`]: the frozen downstream workflows and their public features.
//! - [`codebook`], [`wcpq`]: the WCPQ codebook (builder and artifact) and the mapper.
//! - [`config`]: configuration validation from text and bytes.
//! - [`rng`]: deterministic random numbers.

pub mod baseline;
pub mod certificate;
pub mod codebook;
pub mod config;
pub mod contract;
pub mod features;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod mechanism;
pub mod release;
pub mod rng;
pub mod timing;
pub mod wcpq;
pub mod wire;
pub mod workflow;
