//! The released `usage` object: the token counts the contract's `usage` policy keeps.

use std::borrow::Cow;

use crate::contract::{Contract, Usage};
use crate::wire::json::{Json, Number, Object};
use crate::wire::{Invalid, Node};

/// The released `usage`: both counts, always, as integers (the System One schema and the
/// SDKs' strict models require both). A count the contract's policy keeps is the
/// provider's (absent or null: 0; a whole number written as a float, `392.0`, is that
/// integer; anything else refuses the answer as `missing_field`, the reason of every field
/// of the wrong type); a count it drops is 0.
pub(super) fn release_usage<N: Node>(
    contract: &Contract,
    usage: Option<&N>,
) -> Result<Object<'static>, Invalid> {
    let mut out = Object::with_capacity(2);
    for (key, kept) in [
        ("input_tokens", contract.usage != Usage::Drop),
        // `input` and `drop`: the output count follows what the model wrote.
        ("output_tokens", contract.usage.keeps()),
    ] {
        let count = match usage.and_then(|usage| usage.member(key)) {
            Some(count) if kept && !count.is_null() => token_count(count)?,
            _ => 0,
        };
        out.insert(Cow::Borrowed(key), Json::Number(Number::Unsigned(count)));
    }
    Ok(out)
}

/// A token count: a non-negative integer, or a float holding one exactly.
fn token_count<N: Node>(count: &N) -> Result<u64, Invalid> {
    if let Some(count) = count.unsigned() {
        return Ok(count);
    }
    match count.number() {
        // Below 2^53 every whole float is exactly the integer it shows.
        Some(x) if x >= 0.0 && x.fract() == 0.0 && x < 9_007_199_254_740_992.0 => Ok(x as u64),
        _ => Err(Invalid::MissingField),
    }
}
