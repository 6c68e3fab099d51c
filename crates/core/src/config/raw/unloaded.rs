//! What a configuration loaded without its codebooks (`Inputs::codebooks` false) leaves out:
//! each WCPQ question's codebook, which validation then neither reads nor checks (the question
//! is built with the mechanism `none`). `check-config --no-codebooks` names them, so that it can
//! check everything else before the first `collect` and `build-codebook`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::mechanism::{Fallback, Raw};

/// A WCPQ question whose codebook was not loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct UnloadedCodebook {
    /// The question's key, `contracts.NAME.questions.ID`.
    pub question: String,
    /// The codebook file it names, resolved against the configuration's directory.
    pub path: PathBuf,
    /// Its `fallback`, when stated (validation requires one once codebooks load).
    pub fallback: Option<Fallback>,
}

/// The WCPQ questions of `contracts` (raw, before validation), by contract and question id.
pub(super) fn unloaded_codebooks(
    contracts: &BTreeMap<String, super::RawContract>,
    base_dir: &Path,
) -> Vec<UnloadedCodebook> {
    let mut out = Vec::new();
    for (name, contract) in contracts {
        for (id, question) in &contract.questions {
            if let Raw::Wcpq {
                codebook,
                codebooks,
                fallback,
                ..
            } = &question.mechanism
            {
                // The first provider's `codebook`, then each provider's of `codebooks`.
                for path in codebook.iter().chain(codebooks.values()) {
                    out.push(UnloadedCodebook {
                        question: format!("contracts.{name}.questions.{id}"),
                        path: base_dir.join(path),
                        fallback: *fallback,
                    });
                }
            }
        }
    }
    out
}
