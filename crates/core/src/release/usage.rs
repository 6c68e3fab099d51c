//! The released `usage` object: the token counts the contract's `usage` policy keeps.

use std::borrow::Cow;

use crate::contract::{Contract, Usage};
use crate::wire::json::{Json, Number, Object};
use crate::wire::{Invalid, Node};

/// The released `usage`: the counts the contract's policy keeps, from the provider's
/// `usage` (a count absent or null is left out; one present must be a non-negative
/// integer, else the answer is refused as `missing_field`, the reason of every field of
/// the wrong type), and zero for the counts it drops.
pub(super) fn release_usage<N: Node>(
    contract: &Contract,
    usage: Option<&N>,
) -> Result<Object<'static>, Invalid> {
    let mut out = Object::with_capacity(2);
    let zero = || Json::Number(Number::Unsigned(0));
    // `drop`: schema-complete and carrying nothing: the published schema and the SDKs'
    // strict models require both counts, and zero says nothing about the input.
    let keys: &[&'static str] = match contract.usage {
        Usage::Keep => &["input_tokens", "output_tokens"],
        Usage::Input => &["input_tokens"],
        Usage::Drop => &[],
    };
    if keys.is_empty() {
        out.insert(Cow::Borrowed("input_tokens"), zero());
    }
    for key in keys {
        match usage.and_then(|usage| usage.member(key)) {
            None => {}
            Some(count) if count.is_null() => {}
            Some(count) => {
                let count = count.unsigned().ok_or(Invalid::MissingField)?;
                out.insert(Cow::Borrowed(*key), Json::Number(Number::Unsigned(count)));
            }
        }
    }
    if !contract.usage.keeps() {
        // `input` and `drop`: the output count follows what the model wrote.
        out.insert(Cow::Borrowed("output_tokens"), zero());
    }
    Ok(out)
}
