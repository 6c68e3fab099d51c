//! The released `usage` object: the token counts the contract's `usage` policy keeps.

use std::borrow::Cow;

use crate::contract::{Contract, Usage};
use crate::wire::json::{Json, Number, Object};
use crate::wire::{Invalid, Node};

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
