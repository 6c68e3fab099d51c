//! The simulated provider's hashing: canonical JSON of the request's parts and the seeds
//! and random streams drawn from it.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{MAX_DEPTH, invalid};
use crate::simulate::Error;
use releasegate_core::rng::Rng;

/// Canonical compact JSON: object keys sorted, no whitespace.
pub(super) fn canonical(value: &Value) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    write_canonical(value, &mut out, 0)?;
    Ok(out)
}

fn write_canonical(value: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(invalid(&[], "request nests too deeply"));
    }
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_leaf(&Value::String(key.clone()), out);
                out.push(b':');
                if let Some(child) = map.get(key) {
                    write_canonical(child, out, depth + 1)?;
                }
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out, depth + 1)?;
            }
            out.push(b']');
        }
        leaf => write_leaf(leaf, out),
    }
    Ok(())
}

fn write_leaf(leaf: &Value, out: &mut Vec<u8>) {
    // Serializing a leaf into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, leaf);
}

pub(super) fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

pub(super) fn seed_of(parts: &[&[u8]]) -> u64 {
    let d = digest(parts);
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_le_bytes(first)
}

/// An independent stream per label, so answers do not depend on label order.
pub(super) fn label_rng(seed: u64, label: &str) -> Rng {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in label.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    Rng::new(seed ^ h.rotate_left(17))
}
