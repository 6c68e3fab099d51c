//! Public request features taken from a request `state` by JSON pointer.
//!
//! Shared by the frozen logistic posterior of the workflows and by the leakage audit's attacker, so
//! both read exactly the same public information. Extraction never panics: a missing pointer, a
//! value of an unexpected type or an invalid pointer yields zeros for that feature block.
//!
//! Feature blocks, in declaration order:
//! - `categorical { pointer, values }`: one indicator per listed value, 1.0 when the value at
//!   `pointer` equals it as JSON (`"a"` != `1`, and `1` != `1.0`), else 0.0.
//! - `tokens { pointer, vocabulary }`: one count per vocabulary entry. The value at `pointer` is
//!   turned into text fragments (a string as is; a number by its JSON text; a bool as `true`/
//!   `false`; arrays and object values recursively in document order, object keys excluded;
//!   null nothing). Each fragment is ASCII-lower-cased and split into maximal runs of `[a-z0-9]`
//!   (every other character, including non-ASCII letters, separates tokens). The count of a
//!   vocabulary entry is how often it occurs as a token.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Errors of a feature specification.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A pointer is neither empty nor starts with `/` (RFC 6901).
    #[error("features[{index}].pointer: {pointer:?} is not a json pointer")]
    Pointer {
        /// Position of the feature block.
        index: usize,
        /// The offending pointer.
        pointer: String,
    },
    /// A vocabulary entry is not a `[a-z0-9]+` token or repeats.
    #[error("features[{index}].vocabulary: {message}")]
    Vocabulary {
        /// Position of the feature block.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// A categorical value repeats.
    #[error("features[{index}].values: duplicate value {value}")]
    DuplicateValue {
        /// Position of the feature block.
        index: usize,
        /// The repeated value as JSON text.
        value: String,
    },
}

/// One block of public features.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PublicFeature {
    /// Indicators of a categorical value.
    Categorical {
        /// RFC 6901 pointer into the request state.
        pointer: String,
        /// The fixed value list, one indicator each.
        values: Vec<Value>,
    },
    /// Token counts over a fitted vocabulary.
    Tokens {
        /// RFC 6901 pointer into the request state.
        pointer: String,
        /// The fitted vocabulary, one count each.
        vocabulary: Vec<String>,
    },
}

/// A validated list of public feature blocks (serialized as `{"features": [...]}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "SpecDef", into = "SpecDef")]
pub struct PublicFeatureSpec {
    features: Vec<PublicFeature>,
    /// Per block: token -> position in the vocabulary (empty for categorical blocks).
    token_index: Vec<BTreeMap<String, usize>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecDef {
    features: Vec<PublicFeature>,
}

// === impl PublicFeatureSpec ===

impl PublicFeatureSpec {
    /// Validates feature blocks (pointer syntax, token-shaped and unique vocabulary, unique values).
    pub fn new(features: Vec<PublicFeature>) -> Result<PublicFeatureSpec, Error> {
        let mut token_index = Vec::with_capacity(features.len());
        for (index, feature) in features.iter().enumerate() {
            let pointer = match feature {
                PublicFeature::Categorical { pointer, .. }
                | PublicFeature::Tokens { pointer, .. } => pointer,
            };
            if !(pointer.is_empty() || pointer.starts_with('/')) {
                return Err(Error::Pointer {
                    index,
                    pointer: pointer.clone(),
                });
            }
            let mut map = BTreeMap::new();
            match feature {
                PublicFeature::Categorical { values, .. } => {
                    for (i, v) in values.iter().enumerate() {
                        if values[..i].contains(v) {
                            return Err(Error::DuplicateValue {
                                index,
                                value: v.to_string(),
                            });
                        }
                    }
                }
                PublicFeature::Tokens { vocabulary, .. } => {
                    for (pos, token) in vocabulary.iter().enumerate() {
                        if token.is_empty()
                            || !token
                                .bytes()
                                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                        {
                            return Err(Error::Vocabulary {
                                index,
                                message: format!("{token:?} is not a [a-z0-9]+ token"),
                            });
                        }
                        if map.insert(token.clone(), pos).is_some() {
                            return Err(Error::Vocabulary {
                                index,
                                message: format!("duplicate token {token:?}"),
                            });
                        }
                    }
                }
            }
            token_index.push(map);
        }
        Ok(PublicFeatureSpec {
            features,
            token_index,
        })
    }

    /// An empty specification (no public features).
    pub fn empty() -> PublicFeatureSpec {
        PublicFeatureSpec {
            features: Vec::new(),
            token_index: Vec::new(),
        }
    }

    /// The feature blocks in declaration order.
    pub fn features(&self) -> &[PublicFeature] {
        &self.features
    }

    /// The length of the vector returned by [`PublicFeatureSpec::extract`].
    pub fn dim(&self) -> usize {
        self.features
            .iter()
            .map(|f| match f {
                PublicFeature::Categorical { values, .. } => values.len(),
                PublicFeature::Tokens { vocabulary, .. } => vocabulary.len(),
            })
            .sum()
    }

    /// Human-readable names, one per extracted feature: `cat:{pointer}={value}`, `tok:{pointer}:{token}`.
    pub fn names(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.dim());
        for f in &self.features {
            match f {
                PublicFeature::Categorical { pointer, values } => {
                    out.extend(values.iter().map(|v| format!("cat:{pointer}={v}")));
                }
                PublicFeature::Tokens {
                    pointer,
                    vocabulary,
                } => out.extend(vocabulary.iter().map(|t| format!("tok:{pointer}:{t}"))),
            }
        }
        out
    }

    /// Extracts the feature vector (length [`PublicFeatureSpec::dim`]) from a request state.
    pub fn extract(&self, state: &Value) -> Vec<f64> {
        let mut out = Vec::with_capacity(self.dim());
        for (f, index) in self.features.iter().zip(&self.token_index) {
            match f {
                PublicFeature::Categorical { pointer, values } => {
                    let found = state.pointer(pointer);
                    out.extend(
                        values
                            .iter()
                            .map(|v| if found == Some(v) { 1.0 } else { 0.0 }),
                    );
                }
                PublicFeature::Tokens {
                    pointer,
                    vocabulary,
                } => {
                    let start = out.len();
                    out.resize(start + vocabulary.len(), 0.0);
                    if let Some(value) = state.pointer(pointer) {
                        let counts = &mut out[start..];
                        visit_text(value, &mut |text| {
                            for token in tokens(text) {
                                if let Some(&pos) = index.get(token.as_str()) {
                                    counts[pos] += 1.0;
                                }
                            }
                        });
                    }
                }
            }
        }
        out
    }
}

impl TryFrom<SpecDef> for PublicFeatureSpec {
    type Error = Error;

    fn try_from(def: SpecDef) -> Result<Self, Self::Error> {
        PublicFeatureSpec::new(def.features)
    }
}

impl From<PublicFeatureSpec> for SpecDef {
    fn from(spec: PublicFeatureSpec) -> Self {
        SpecDef {
            features: spec.features,
        }
    }
}

/// Splits text into lower-cased `[a-z0-9]+` tokens (ASCII only; everything else separates).
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for ch in text.chars() {
        if ch.is_ascii_alphanumeric() {
            current.push(ch.to_ascii_lowercase());
        } else if !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Calls `f` on every text fragment of `value` in document order (iterative; no recursion limit).
pub fn visit_text(value: &Value, f: &mut impl FnMut(&str)) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Null => {}
            Value::Bool(b) => f(if *b { "true" } else { "false" }),
            Value::Number(n) => f(&n.to_string()),
            Value::String(s) => f(s),
            Value::Array(items) => stack.extend(items.iter().rev()),
            Value::Object(map) => {
                let values: Vec<&Value> = map.values().collect();
                stack.extend(values.into_iter().rev());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> PublicFeatureSpec {
        serde_json::from_value(json!({"features": [
            {"kind": "categorical", "pointer": "/meta/channel", "values": ["web", "phone", 3]},
            {"kind": "tokens", "pointer": "/text", "vocabulary": ["late", "box", "42"]},
        ]}))
        .unwrap()
    }

    #[test]
    fn extracts_indicators_and_token_counts() {
        let s = spec();
        let state = json!({"meta": {"channel": "phone"}, "text": "LATE, late!! Box#42 élate"});
        // The non-ASCII letter separates tokens, so "élate" contains the token "late".
        assert_eq!(s.extract(&state), vec![0.0, 1.0, 0.0, 3.0, 1.0, 1.0]);
        assert_eq!(s.dim(), 6);
        assert_eq!(s.names()[0], "cat:/meta/channel=\"web\"");
        assert_eq!(s.names()[5], "tok:/text:42");
    }

    #[test]
    fn missing_or_odd_values_give_zeros_without_panicking() {
        let s = spec();
        for state in [
            json!(null),
            json!({}),
            json!({"meta": 5, "text": null}),
            json!([1, 2]),
            json!({"meta": {"channel": 3.0}}),
        ] {
            assert_eq!(s.extract(&state), vec![0.0; 6], "{state}");
        }
        let state = json!({"meta": {"channel": 3}, "text": ["late", {"k": "box 42", "box": 1}]});
        assert_eq!(s.extract(&state), vec![0.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn rejects_bad_specs_and_roundtrips() {
        let bad = |v: Value| serde_json::from_value::<PublicFeatureSpec>(v).is_err();
        assert!(bad(
            json!({"features": [{"kind": "tokens", "pointer": "text", "vocabulary": []}]})
        ));
        assert!(bad(
            json!({"features": [{"kind": "tokens", "pointer": "/t", "vocabulary": ["A"]}]})
        ));
        assert!(bad(
            json!({"features": [{"kind": "tokens", "pointer": "/t", "vocabulary": ["a", "a"]}]})
        ));
        assert!(bad(
            json!({"features": [{"kind": "categorical", "pointer": "/t", "values": [1, 1]}]})
        ));
        assert!(bad(json!({"features": [], "extra": 1})));
        let s = spec();
        let back: PublicFeatureSpec =
            serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        assert_eq!(tokens("a-B c9"), vec!["a", "b", "c9"]);
    }
}
