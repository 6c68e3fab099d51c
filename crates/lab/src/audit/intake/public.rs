//! The public request features of a contract's audit, fitted on its train worlds from the
//! contract's `public` declarations: the most frequent categories and tokens.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::Usable;
use releasegate_core::contract::{Contract, PublicField, PublicKind};
use releasegate_core::features::{self, PublicFeature, PublicFeatureSpec};
use releasegate_sim::worlds::{self, World};

/// Fits the public features per contract on its train worlds and sets each usable world's.
pub(super) fn extract(contracts: &[Arc<Contract>], usable: &mut [Usable<'_>]) {
    let specs: Vec<PublicFeatureSpec> = (0..contracts.len())
        .map(|c| {
            fit_public(
                &contracts[c],
                usable.iter().filter(|u| u.contract == c).map(|u| u.world),
            )
        })
        .collect();
    for u in usable {
        let state = u.world.request.get("state").unwrap_or(&Value::Null);
        u.public = specs[u.contract].extract(state);
    }
}

/// Fits a contract's public features on its train worlds.
fn fit_public<'w>(
    contract: &Contract,
    worlds: impl Iterator<Item = &'w World>,
) -> PublicFeatureSpec {
    let train: Vec<&World> = worlds.filter(|w| w.split == worlds::Split::Train).collect();
    let mut features = Vec::new();
    for field in contract.public() {
        let values = train.iter().filter_map(|w| {
            w.request
                .get("state")
                .and_then(|s| s.pointer(&field.pointer))
        });
        features.push(match field.kind {
            PublicKind::Categorical => categorical(field, values),
            PublicKind::Tokens => tokens(field, values),
        });
    }
    // Pointers are validated with the configuration and vocabularies come from the tokenizer.
    PublicFeatureSpec::new(features).unwrap_or_else(|_| PublicFeatureSpec::empty())
}

/// The field's most frequent values (ties in text order), at most `max_features` (32).
fn categorical<'v>(field: &PublicField, values: impl Iterator<Item = &'v Value>) -> PublicFeature {
    let mut counts: BTreeMap<String, (u64, Value)> = BTreeMap::new();
    for value in values {
        counts
            .entry(value.to_string())
            .or_insert((0, value.clone()))
            .0 += 1;
    }
    let mut ranked: Vec<(String, (u64, Value))> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.0.cmp(&a.1.0).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(field.max_features.unwrap_or(32));
    PublicFeature::Categorical {
        pointer: field.pointer.clone(),
        values: ranked.into_iter().map(|(_, (_, v))| v).collect(),
    }
}

/// The field's most frequent tokens (ties in text order), at most `max_features` (64).
fn tokens<'v>(field: &PublicField, values: impl Iterator<Item = &'v Value>) -> PublicFeature {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for value in values {
        features::visit_text(value, &mut |text| {
            for token in features::tokens(text) {
                *counts.entry(token).or_default() += 1;
            }
        });
    }
    let mut ranked: Vec<(String, u64)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(field.max_features.unwrap_or(64));
    PublicFeature::Tokens {
        pointer: field.pointer.clone(),
        vocabulary: ranked.into_iter().map(|(t, _)| t).collect(),
    }
}
