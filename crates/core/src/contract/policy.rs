//! A contract's leakage policy (`policy = { keep, hide, max_recovery_gain }`) and the
//! request fields it declares public: what the gate reads, never the proxy at request time.

use serde::Deserialize;

use super::Contract;

/// `policy = { keep = [...], hide = [...], max_recovery_gain = 0.05 }` of a contract: what the
/// recipient must receive, what it must not learn, and how much above no output it may learn
/// (`docs/gate.md`). Never read by the proxy at request time.
#[derive(Debug, Clone, PartialEq)]
pub struct LeakagePolicy {
    /// Fields the recipient must receive.
    pub keep: Vec<KeepField>,
    /// What the recipient must not learn.
    pub hide: Vec<Hidden>,
    /// Largest allowed recovery gain over no output (upper interval bound) for what `hide`
    /// names; 0 when `hide` is given without it.
    pub max_recovery_gain: f64,
}

/// One `keep` entry: `FIELD` (every question) or `QUESTION.FIELD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeepField {
    /// The question, or None for every question of the contract.
    pub question: Option<String>,
    /// The field.
    pub field: Field,
}

/// A prediction field a `keep` entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The selected class (`choice`; `score`/`noul` answers carry it as their value).
    Choice,
    /// The probability vector.
    Probabilities,
    /// The provider's confidence.
    Confidence,
}

/// What a `hide` entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hidden {
    /// The audit's protected secret: which of a pair's two registered hypotheses holds.
    Secret,
}

// === impl Field ===

impl Field {
    /// Parses a field name.
    pub fn parse(name: &str) -> Option<Field> {
        match name {
            "choice" => Some(Field::Choice),
            "probabilities" => Some(Field::Probabilities),
            "confidence" => Some(Field::Confidence),
            _ => None,
        }
    }

    /// The field's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Field::Choice => "choice",
            Field::Probabilities => "probabilities",
            Field::Confidence => "confidence",
        }
    }
}

// === impl LeakagePolicy ===

impl LeakagePolicy {
    /// `keep` entries the contract's release drops, as `QUESTION.FIELD` (the view does not
    /// release the field, or the mechanism never sends it, e.g. WCPQ `confidence = "drop"`).
    pub fn dropped(&self, contract: &Contract) -> Vec<String> {
        let mut dropped = Vec::new();
        for keep in &self.keep {
            for (id, rule) in &contract.questions {
                if keep.question.as_ref().is_some_and(|q| q != id) {
                    continue;
                }
                if !rule.releases(keep.field) {
                    dropped.push(format!("{id}.{}", keep.field.as_str()));
                }
            }
        }
        dropped
    }
}

/// A request field declared public, for the leakage audit.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicField {
    /// RFC 6901 pointer into the request `state`.
    pub pointer: String,
    /// How the field becomes features.
    pub kind: PublicKind,
    /// Most categorical values or vocabulary tokens fitted on the train split
    /// (default 32 values, 64 tokens).
    #[serde(default)]
    pub max_features: Option<usize>,
}

/// How a public field becomes features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublicKind {
    /// One indicator per value seen on the train split.
    Categorical,
    /// Counts of lower-cased `[a-z0-9]+` tokens of a vocabulary fitted on the train split.
    Tokens,
}
