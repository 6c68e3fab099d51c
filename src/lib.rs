//! releasegate: a release-sanitizing proxy for typed decision APIs.
pub mod baseline;
pub mod codebook;
pub mod features;
pub mod rng;
pub mod wcpq;
pub mod workflow;
