//! The TUPLE-like simulator: paired counterfactual worlds and the in-process
//! `simulated` System One provider that answers them.
//!
//! [`Generator`] registers pairs over the [`ontology`] (three domains, four
//! coarse classes, four mechanisms per class), writes a real System One request
//! for each world and answers it by calling [`respond`], the same function the
//! proxy uses for providers of kind `simulated`. Everything is deterministic:
//! the same options give byte-identical worlds, and the provider's answer is a
//! pure function of the request content. See `docs/simulator.md`.

mod cases;
mod evidence;
pub mod ontology;
mod provider;

use serde_json::Value;

#[cfg(any(test, feature = "test-support"))]
pub use cases::pinned_text_toml;
pub use cases::{COARSE_QUESTION, Generator, INSTRUCTIONS};
pub use provider::{LATEST_MODEL, MAX_CHOICES, MAX_LEVELS, PREVIEW_MODEL};

/// Errors of the simulator and of the simulated provider.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request body is not JSON.
    #[error("request body is not valid json")]
    Json(#[source] serde_json::Error),
    /// The request is JSON but not a valid System One request.
    #[error("invalid request at {}: {reason}", loc.join("."))]
    Invalid {
        /// Location in FastAPI style, e.g. `["body", "questions", "q1", "criteria"]`.
        loc: Vec<String>,
        /// Lowercase reason, e.g. "field required".
        reason: String,
    },
}

/// Options of [`Generator`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Pairs per domain; the paper's benchmark uses 240 (720 pairs in total).
    pub pairs_per_domain: usize,
    /// Seed of every random choice.
    pub seed: u64,
}

// === impl Options ===

impl Default for Options {
    fn default() -> Self {
        Options {
            pairs_per_domain: 240,
            seed: 0,
        }
    }
}

impl Options {
    /// Total number of pairs over all domains.
    pub fn total_pairs(&self) -> usize {
        self.pairs_per_domain * ontology::DOMAINS.len()
    }

    /// Total number of worlds (two per pair).
    #[cfg(any(test, feature = "test-support"))]
    pub fn total_worlds(&self) -> usize {
        2 * self.total_pairs()
    }
}

/// Generates all worlds, pair by pair (`w0` then `w1`), domain by domain (what
/// [`Generator`] streams, collected: for tests and benches).
#[cfg(any(test, feature = "test-support"))]
pub fn generate(options: &Options) -> Result<Vec<crate::worlds::World>, Error> {
    let mut worlds = Vec::with_capacity(options.total_worlds());
    for pair in Generator::new(options) {
        let [w0, w1] = pair?;
        worlds.push(w0);
        worlds.push(w1);
    }
    Ok(worlds)
}

/// Answers a System One request like the real service would (the model is
/// described in `docs/simulator.md`): deterministic, never panics.
///
/// Rejected with [`Error::Invalid`]: a body that is not an object; `model`
/// missing or not a non-empty string; `state` missing or a number, boolean or
/// null; `questions` missing, not an object or empty; a question that is not an
/// object, has no string `type`, or has `instructions` that is a number or
/// boolean; a `choice` without an object of 2 to 255 criteria; a `score` without
/// an array of 1 to 255 levels; criteria content that is a number or boolean; a
/// `noul` whose `criteria` is neither an object nor null; any other question
/// type (including `box`). Unknown top-level fields (e.g. `assets`) are ignored.
pub fn respond(request: &Value) -> Result<Value, Error> {
    provider::respond(request)
}

#[cfg(test)]
mod tests;
