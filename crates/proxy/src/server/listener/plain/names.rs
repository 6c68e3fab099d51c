//! Request field names: the common ones matched in any case without being parsed
//! ([`field_name`]), and the case-insensitive comparison the plain path makes of every
//! name it looks for ([`same_name`]).

use axum::http::{HeaderName, header};

/// The names the official clients send on every request (and `connection`), made once:
/// such a name is matched here, in any case, instead of parsed, and one the
/// `http` crate does not know (`x-typesafe-*`) is not copied into an allocation of its
/// own for each request.
pub(super) static COMMON_NAMES: [HeaderName; 12] = [
    header::HOST,
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::ACCEPT,
    header::ACCEPT_ENCODING,
    header::USER_AGENT,
    header::AUTHORIZATION,
    header::CONNECTION,
    HeaderName::from_static("x-typesafe-sdk"),
    HeaderName::from_static("x-typesafe-runtime"),
    HeaderName::from_static("x-typesafe-retry-count"),
    HeaderName::from_static("traceparent"),
];

/// [`COMMON_NAMES`]' texts, in the same order: compared as they are (a standard name's
/// `as_str` is a match on its variant, which cost more than the comparison).
pub(super) const COMMON_TEXTS: [&[u8]; 12] = [
    b"host",
    b"content-type",
    b"content-length",
    b"accept",
    b"accept-encoding",
    b"user-agent",
    b"authorization",
    b"connection",
    b"x-typesafe-sdk",
    b"x-typesafe-runtime",
    b"x-typesafe-retry-count",
    b"traceparent",
];

/// A request field's name as `HeaderName::from_bytes` makes it (lower case), `None`
/// where it refuses it.
pub(super) fn field_name(raw: &[u8]) -> Option<HeaderName> {
    let first = raw.first().map(u8::to_ascii_lowercase);
    COMMON_TEXTS
        .iter()
        .position(|text| {
            text.len() == raw.len() && text.first() == first.as_ref() && same_name(raw, text)
        })
        .and_then(|at| COMMON_NAMES.get(at))
        .cloned()
        .map_or_else(|| HeaderName::from_bytes(raw).ok(), Some)
}

/// Whether `raw` is `lower` (lower-case ASCII) in any case: `raw.eq_ignore_ascii_case(lower)`,
/// eight bytes at a time. Names and the texts they are compared with run to 22 bytes, and
/// a byte at a time the comparisons cost the plain path about 1,500 instructions a
/// request.
pub(super) fn same_name(raw: &[u8], lower: &[u8]) -> bool {
    let n = raw.len();
    if n != lower.len() {
        return false;
    }
    if n < 8 {
        return raw.eq_ignore_ascii_case(lower);
    }
    // Whole words, then the last eight bytes (overlapping the words before them).
    let same = |at: usize| lower_word(word(raw, at)) == word(lower, at);
    (0..n / 8).all(|i| same(8 * i)) && same(n - 8)
}

/// The eight bytes of `bytes` from `at`, little-endian.
fn word(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// `x` with each of its bytes `to_ascii_lowercase`d: a byte from `A` to `Z` gets its
/// `0x20` bit, every other byte (those from `0x80` too) stays as it is.
fn lower_word(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = ONES * 0x80;
    // With each byte's high bit cleared no sum below carries into the next byte: a
    // byte's high bit is then set in `from_a` where it is at least `A`, in `past_z`
    // where it is past `Z`.
    let low = x & !HIGHS;
    let from_a = low + ONES * u64::from(0x80 - b'A');
    let past_z = low + ONES * u64::from(0x80 - b'Z' - 1);
    let upper = from_a & !past_z & !x & HIGHS;
    x | (upper >> 2)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{lower_word, same_name};

    #[test]
    fn words_are_lowered_as_each_byte_is() {
        for b in 0..=255u8 {
            let word = u64::from_le_bytes([b, b'A', b'Z', b'@', b'[', b, 0x80 | b, b'z']);
            let lowered = u64::from_le_bytes(word.to_le_bytes().map(|b| b.to_ascii_lowercase()));
            assert_eq!(lower_word(word), lowered, "{b:#x}");
        }
    }

    proptest! {
        #[test]
        fn names_compare_as_eq_ignore_ascii_case_does(
            lower in "[a-z0-9-]{0,30}",
            flips in prop::collection::vec(any::<u8>(), 30),
            other in prop::collection::vec(any::<u8>(), 0..30),
        ) {
            let lower = lower.as_bytes();
            // The same name with some bytes changed (upper-cased, or any byte at all).
            let raw: Vec<u8> = lower
                .iter()
                .zip(&flips)
                .map(|(&b, &flip)| match flip % 4 {
                    0 => b.to_ascii_uppercase(),
                    1 if flip > 250 => flip,
                    1 => b ^ 0x20,
                    _ => b,
                })
                .collect();
            for raw in [&raw[..], &other[..], lower] {
                prop_assert_eq!(same_name(raw, lower), raw.eq_ignore_ascii_case(lower));
            }
        }
    }
}
