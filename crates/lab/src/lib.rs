//! releasegate's offline tools: replay of a contract over saved worlds and the leakage audit.
//!
//! - [`replay`]: streams worlds through a contract's release, in parallel, in input order.
//! - [`audit`]: the leakage audit (decoders, ensembles, bootstrap, frontier, gate, SVG).

pub mod audit;
pub mod replay;
