//! releasegate: a release-sanitizing proxy for typed decision APIs.
pub mod rng;
pub mod simulate;
pub mod worlds;
