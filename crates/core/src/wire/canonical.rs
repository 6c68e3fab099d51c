//! Canonical JSON: one spelling of every value (sorted keys, no whitespace, normalized
//! numbers), for comparing values and for keying seeded noise.

use serde_json::Value;

/// Whether two JSON values are the same value: compared in canonical form (object key
/// order, whitespace and number spelling do not matter).
pub fn same_json(a: &Value, b: &Value) -> bool {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    canonical_json(a, &mut x);
    canonical_json(b, &mut y);
    x == y
}

/// Canonical JSON: object keys sorted by their UTF-8 bytes, no whitespace, strings
/// escaped by serde_json, integral numbers within ±2^53 written as integers (`1.0`
/// and `1e0` are `1`, `-0.0` is `0`), other numbers in Rust's shortest round-trip form.
pub fn canonical_json(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => {
            let text = if let Some(u) = n.as_u64() {
                u.to_string()
            } else if let Some(i) = n.as_i64() {
                i.to_string()
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
                    (f as i64).to_string()
                } else {
                    f.to_string()
                }
            };
            out.extend_from_slice(text.as_bytes());
        }
        Value::String(s) => {
            out.extend(serde_json::to_vec(s).unwrap_or_default());
        }
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                canonical_json(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                out.extend(serde_json::to_vec(key).unwrap_or_default());
                out.push(b':');
                canonical_json(item, out);
            }
            out.push(b'}');
        }
    }
}
