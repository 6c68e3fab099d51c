//! releasegate's simulator: TUPLE-Bench-style worlds and the provider that answers them.
//!
//! - [`simulate`]: the world generator and the in-process simulated provider.
//! - [`worlds`]: the saved decision log format (JSON Lines), over any reader or writer.
//! - [`dataset`]: one contract question's native answers out of saved worlds.
//! - [`requests`]: the requests file of `releasegate collect` and the worlds it becomes.

pub mod dataset;
pub mod requests;
pub mod simulate;
pub mod worlds;
