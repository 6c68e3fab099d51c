//! A `serde_json::Value` written to bytes, byte for byte as `serde_json::to_vec` writes it.
//!
//! serde_json writes through `io::Write`, three calls (and three copies) per string
//! and one per punctuation mark; on the proxy's request path that was about a tenth of
//! its instructions for two small documents (the request that goes upstream and the
//! release). This writer appends to one vector: strings are copied in runs between
//! the bytes that need an escape, numbers are formatted by the same crates serde_json
//! uses (`itoa` for integers, `zmij` for floats), and the escapes are serde_json's
//! (`\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, and `\u00xx` with lower-case hex digits
//! for the other control characters). Property tests hold it to serde_json's output.

use serde_json::Value;

use super::scan::{find_stop, first_stop, padded, word_at};
use super::{Json, Number};

/// A document the writer can write: a `serde_json::Value` or a [`Json`].
pub trait Document {
    /// Appends the document as compact JSON to `out`.
    fn write(&self, out: &mut Vec<u8>);
}

/// `document` as JSON bytes (compact, members in their order).
pub fn to_vec(document: &impl Document) -> Vec<u8> {
    // A release or an error body mostly fits; larger ones grow as usual.
    let mut out = Vec::with_capacity(1024);
    document.write(&mut out);
    out
}

impl Document for Value {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Value::Null => out.extend_from_slice(b"null"),
            Value::Bool(b) => write_bool(*b, out),
            Value::Number(number) => write_number(
                match (number.as_u64(), number.as_i64()) {
                    (Some(n), _) => Number::Unsigned(n),
                    (None, Some(n)) => Number::Signed(n),
                    (None, None) => Number::Float(number.as_f64().unwrap_or(f64::NAN)),
                },
                out,
            ),
            Value::String(text) => write_str(text, out),
            Value::Array(items) => write_array(items, out),
            Value::Object(members) => {
                write_object(members.iter().map(|(k, v)| (k.as_str(), v)), out)
            }
        }
    }
}

impl Document for Json<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Json::Null => out.extend_from_slice(b"null"),
            Json::Bool(b) => write_bool(*b, out),
            Json::Number(number) => write_number(*number, out),
            Json::String(text) => write_str(text, out),
            Json::Array(items) => write_array(items, out),
            Json::Object(object) => write_object(object.iter(), out),
            Json::Written(written) => out.extend_from_slice(written.bytes()),
        }
    }
}

fn write_bool(b: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

fn write_array<D: Document>(items: &[D], out: &mut Vec<u8>) {
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        item.write(out);
    }
    out.push(b']');
}

/// Appends an object of `members` (keys written as given, in order).
pub fn write_object<'d, D: Document + 'd>(
    members: impl Iterator<Item = (&'d str, &'d D)>,
    out: &mut Vec<u8>,
) {
    out.push(b'{');
    for (i, (key, item)) in members.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(key, out);
        out.push(b':');
        item.write(out);
    }
    out.push(b'}');
}

/// A number as serde_json writes it: integers in decimal, floats in the shortest form
/// that reads back to the same value, and a non-finite float (which a `Value` never
/// holds) as `null`, as serde_json writes one.
fn write_number(number: Number, out: &mut Vec<u8>) {
    match number {
        Number::Unsigned(n) => out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes()),
        Number::Signed(n) => out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes()),
        Number::Float(x) if x.is_finite() => {
            if !write_short_decimal(x, out) {
                out.extend_from_slice(zmij::Buffer::new().format_finite(x).as_bytes());
            }
        }
        Number::Float(_) => out.extend_from_slice(b"null"),
    }
}

/// Writes `x` when it is the double nearest a decimal of at most four places in
/// [0, 10) (probabilities and confidences mostly are), and says whether it did.
///
/// That decimal, with its trailing zeros dropped (and `.0` for a whole number), is
/// exactly what `zmij` (and so serde_json) writes: it reads back to `x`, and any other
/// decimal that does lies within one unit in the last place of `x` (under 10⁻¹⁵ here)
/// of it, so differs from it by less than 10⁻⁴ and cannot be as short. This costs about
/// two thirds of `zmij`'s shortest-form search; the tests hold it to `zmij`.
fn write_short_decimal(x: f64, out: &mut Vec<u8>) -> bool {
    if !(0.0..10.0).contains(&x) || x.is_sign_negative() {
        return false;
    }
    // A candidate only: the check below decides. Division is correctly rounded, so
    // equality means `x` is the double nearest to the decimal `n / 10⁴`.
    let n = (x * 1e4 + 0.5) as u32;
    if f64::from(n) / 1e4 != x {
        return false;
    }
    let fraction = n % 10_000;
    let digits = [
        b'0' + (n / 10_000) as u8,
        b'.',
        b'0' + (fraction / 1000) as u8,
        b'0' + (fraction / 100 % 10) as u8,
        b'0' + (fraction / 10 % 10) as u8,
        b'0' + (fraction % 10) as u8,
        0,
        0,
    ];
    let len = if fraction.is_multiple_of(1000) {
        3
    } else if fraction.is_multiple_of(100) {
        4
    } else if fraction.is_multiple_of(10) {
        5
    } else {
        6
    };
    // All eight bytes, then cut to the length (a copy of a fixed length, no `memcpy` call).
    let end = out.len() + len;
    out.extend_from_slice(&digits);
    out.truncate(end);
    true
}

/// What a byte is written as inside a string: `0` for itself, `u` for `\u00xx`, else
/// the letter after the backslash.
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Appends `text` as a JSON string.
pub fn write_str(text: &str, out: &mut Vec<u8>) {
    let mut rest = text.as_bytes();
    // Most keys, labels and ids are at most sixteen bytes and need no escape: they are
    // written as one or two whole words (the second overlapping the first), cut to
    // their length: no scan loop, no `memcpy` call.
    let n = rest.len();
    if n <= 16 {
        let (head, tail) = if n < 8 {
            (padded(rest), None)
        } else {
            (word_at(rest, 0), Some(word_at(rest, n - 8)))
        };
        if first_stop(head).is_none() && tail.is_none_or(|tail| first_stop(tail).is_none()) {
            out.reserve(18);
            out.push(b'"');
            let start = out.len();
            out.extend_from_slice(&head.to_le_bytes());
            if let Some(tail) = tail {
                out.truncate(start + n - 8);
                out.extend_from_slice(&tail.to_le_bytes());
            }
            out.truncate(start + n);
            out.push(b'"');
            return;
        }
    }
    out.reserve(rest.len() + 2);
    out.push(b'"');
    // Runs of plain content are copied whole; `find_stop` finds exactly the bytes `ESCAPE`
    // names.
    while let Some(at) = find_stop(rest) {
        out.extend_from_slice(&rest[..at]);
        let byte = rest[at];
        rest = &rest[at + 1..];
        let escape = ESCAPE[usize::from(byte)];
        if escape == b'u' {
            // Two digits for one byte: encoding cannot fail.
            let mut digits = *b"00";
            let _ = hex::encode_to_slice([byte], &mut digits);
            out.extend_from_slice(b"\\u00");
            out.extend_from_slice(&digits);
        } else {
            out.push(b'\\');
            out.push(escape);
        }
    }
    out.extend_from_slice(rest);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::to_vec;
    use crate::wire::Json;

    /// Both documents (the `Value` and the same document as a `Json`) are written as
    /// serde_json writes the `Value`.
    fn same_as_serde_json(value: &Value) {
        let expected = String::from_utf8(serde_json::to_vec(value).unwrap()).unwrap();
        assert_eq!(String::from_utf8(to_vec(value)).unwrap(), expected);
        let json = Json::from_value(value);
        assert_eq!(String::from_utf8(to_vec(&json)).unwrap(), expected);
        let owned = Json::from_owned(value.clone());
        assert_eq!(String::from_utf8(to_vec(&owned)).unwrap(), expected);
    }

    #[test]
    fn the_scan_stops_at_exactly_the_escaped_bytes() {
        for byte in 0..=u8::MAX {
            assert_eq!(
                super::super::scan::is_stop(byte),
                super::ESCAPE[usize::from(byte)] != 0,
                "{byte:#04x}"
            );
        }
    }

    #[test]
    fn writes_what_serde_json_writes() {
        for value in [
            json!(null),
            json!(true),
            json!(false),
            json!(0),
            json!(-1),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(0.0),
            json!(-0.0),
            json!(1.0),
            json!(0.1),
            json!(1e300),
            json!(5e-324),
            json!(123456789.125),
            json!(""),
            json!("\"\\/\u{8}\u{c}\n\r\t\u{0}\u{1f}\u{7f}é😀"),
            json!([]),
            json!({}),
            json!({"b": [1, {"a": null}], "a": "x", "": []}),
        ] {
            same_as_serde_json(&value);
        }
    }

    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[\\x00-\\x7f]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((any::<String>(), inner), 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn strings_of_every_short_length_are_written_as_serde_json_writes_them() {
        // Plain strings up to past two words, and each with one byte that needs an escape
        // (or a multi-byte character) at every position.
        for len in 0..24 {
            let plain: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
            same_as_serde_json(&Value::String(plain.clone()));
            for at in 0..len {
                for special in ['"', '\\', '\n', '\u{1}', '\u{1f}', 'é', '\u{7f}'] {
                    let mut text: Vec<char> = plain.chars().collect();
                    text[at] = special;
                    same_as_serde_json(&Value::String(text.into_iter().collect()));
                }
            }
        }
    }

    /// `zmij`'s form of `x`, or the short-decimal form where that applies.
    fn both_forms(x: f64) -> (String, Option<String>) {
        let mut short = Vec::new();
        let written = super::write_short_decimal(x, &mut short);
        (
            zmij::Buffer::new().format_finite(x).to_string(),
            written.then(|| String::from_utf8(short).unwrap()),
        )
    }

    #[test]
    fn short_decimals_are_written_as_zmij_writes_them() {
        // Every decimal of up to four places below 20 (those from 10 on are not taken),
        // each read as serde_json reads it.
        let mut taken = 0;
        for n in 0..200_000u64 {
            let text = format!("{}.{:04}", n / 10_000, n % 10_000);
            let x: f64 = text.parse().unwrap();
            let (zmij, short) = both_forms(x);
            match short {
                Some(short) => {
                    assert_eq!(short, zmij, "{text}");
                    taken += 1;
                }
                None => assert!(n >= 100_000, "{text} not taken"),
            }
        }
        assert_eq!(taken, 100_000);
        for x in [
            -0.0,
            -0.5,
            1e6,
            1e6 - 1e-4,
            0.1 + 0.2,
            1e-5,
            0.00015,
            f64::MIN_POSITIVE,
        ] {
            let (zmij, short) = both_forms(x);
            if let Some(short) = short {
                assert_eq!(short, zmij, "{x:?}");
            }
        }
        assert_eq!(both_forms(-0.0).1, None);
        assert_eq!(both_forms(0.1 + 0.2).1, None);
        assert_eq!(both_forms(0.00015).1, None);
    }

    proptest! {
        #[test]
        fn any_float_is_written_as_zmij_writes_it(x in prop_oneof![any::<f64>(), 0.0..1.0f64, 0.0..10.0f64]) {
            prop_assume!(x.is_finite());
            let (zmij, short) = both_forms(x);
            if let Some(short) = short {
                prop_assert_eq!(short, zmij);
            }
        }

        #[test]
        fn any_value_is_written_as_serde_json_writes_it(value in any_value()) {
            same_as_serde_json(&value);
        }
    }
}
