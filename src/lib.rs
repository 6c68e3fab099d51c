//! releasegate: a release-sanitizing proxy for typed decision APIs.
pub mod audit;
pub mod rng;
