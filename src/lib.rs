//! releasegate: a release-sanitizing proxy for typed decision APIs.
pub mod features;
pub mod rng;
pub mod workflow;
