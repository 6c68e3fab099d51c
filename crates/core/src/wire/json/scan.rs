//! The scan both the reader and the writer make through string content: where the next
//! byte that JSON cannot carry as itself in a string is (a quote, a backslash or a
//! control character below 0x20). Everything between two such bytes is copied or
//! borrowed as one run.
//!
//! Eight bytes are tested at a time (the classic "has a byte below n" and "has a zero
//! byte" word tricks): a request's `state` or a long label is mostly plain text, and a
//! byte-at-a-time table lookup was the reader's and writer's main per-byte cost.

/// Whether a byte ends a run of plain string content (what the word tests below find;
/// the tests hold them and the writer's escape table to it).
#[cfg(test)]
pub(super) const fn is_stop(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// How many bytes are tested a word at a time before a longer run is left to
/// [`find_stop_long`]: most keys, labels and short values end within them.
const WORDS_FIRST: usize = 16;

/// The position of the first byte of `bytes` that ends a run of plain string content.
pub(super) fn find_stop(bytes: &[u8]) -> Option<usize> {
    if bytes.len() > WORDS_FIRST {
        for at in (0..WORDS_FIRST).step_by(8) {
            if let Some(i) = first_stop(word_at(bytes, at)) {
                return Some(at + i);
            }
        }
        return find_stop_long(&bytes[WORDS_FIRST..]).map(|i| WORDS_FIRST + i);
    }
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut words {
        if let Some(i) = first_stop(word_at(chunk, 0)) {
            return Some(at + i);
        }
        at += 8;
    }
    // The last bytes (most keys and labels are shorter than a word) as one more word,
    // padded with spaces, which never stop a run: a hit is always one of the real bytes.
    let rest = words.remainder();
    if rest.is_empty() {
        return None;
    }
    first_stop(padded(rest)).map(|i| at + i)
}

/// Whether `text` is plain string content: JSON writes it as itself, between quotes,
/// so a string is exactly `text` where its bytes are `text` and a closing quote.
pub(crate) fn is_plain(text: &str) -> bool {
    find_stop(text.as_bytes()).is_none()
}

/// [`find_stop`] with its first word tested where it is called: most keys and labels
/// end within it, and a call cost more than the test.
#[inline]
pub(super) fn find_stop_near(bytes: &[u8]) -> Option<usize> {
    if bytes.len() >= 8 {
        if let Some(i) = first_stop(word_at(bytes, 0)) {
            return Some(i);
        }
        return find_stop(&bytes[8..]).map(|i| 8 + i);
    }
    find_stop(bytes)
}

/// [`find_stop`] past its first words (a long `state` or note): the first quote or
/// backslash through `memchr` (vector instructions), then the run before it tested for
/// a control character in one pass without an early exit, which compiles to vector
/// compares too.
fn find_stop_long(bytes: &[u8]) -> Option<usize> {
    let delimiter = memchr::memchr2(b'"', b'\\', bytes).unwrap_or(bytes.len());
    let run = &bytes[..delimiter];
    if run.iter().fold(false, |any, &byte| any | (byte < 0x20)) {
        return run.iter().position(|&byte| byte < 0x20);
    }
    (delimiter < bytes.len()).then_some(delimiter)
}

/// The eight bytes of `bytes` from `at` as a little-endian word (a fixed-length copy:
/// no `memcpy` call).
#[inline]
pub(in crate::wire) fn word_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// `short` (under eight bytes) as a little-endian word padded with spaces. Built a
/// byte at a time into the word: a copy of a variable length would call `memcpy`.
#[inline]
pub(in crate::wire) fn padded(short: &[u8]) -> u64 {
    debug_assert!(short.len() < 8);
    let mut word = u64::from_le_bytes([b' '; 8]);
    for (i, &byte) in short.iter().enumerate() {
        let shift = 8 * i;
        word = (word & !(0xff << shift)) | (u64::from(byte) << shift);
    }
    word
}

/// The index of the first byte of `word` (little-endian) that ends a run, if any.
#[inline]
pub(super) fn first_stop(word: u64) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // `(x - n) & !x` has a byte's high bit set where that byte of `x` is below `n`
    // (n ≤ 0x80); a borrow can flag bytes above a true hit, never below one, so the
    // lowest flagged byte of the three tests is exactly the first stop.
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x;
    let hits = (below(word, 0x20)
        | below(word ^ (ONES * u64::from(b'"')), 1)
        | below(word ^ (ONES * u64::from(b'\\')), 1))
        & HIGHS;
    // Little-endian: the lowest set bit is the earliest byte.
    (hits != 0).then(|| (hits.trailing_zeros() / 8) as usize)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{find_stop, find_stop_near, is_stop};

    fn naive(bytes: &[u8]) -> Option<usize> {
        bytes.iter().position(|&b| is_stop(b))
    }

    #[test]
    fn finds_every_stop_at_every_offset() {
        for stop in (0u8..0x20).chain([b'"', b'\\']) {
            for len in (0..20).chain([31, 32, 33, 64, 65, 200]) {
                for at in 0..len {
                    // Bytes around the stop that sit next to it in value (0x1f/0x20,
                    // 0x21/0x23, 0x5b/0x5d) and high bytes, which borrow tricks confuse.
                    let mut bytes: Vec<u8> = (0..len)
                        .map(|i| [0x20, 0x21, 0x23, 0x5b, 0x5d, 0x80, 0xff, b'a'][i % 8])
                        .collect();
                    bytes[at] = stop;
                    assert_eq!(find_stop(&bytes), Some(at), "{bytes:?}");
                    assert_eq!(find_stop_near(&bytes), Some(at), "{bytes:?}");
                }
            }
        }
        assert_eq!(find_stop(b""), None);
        assert_eq!(find_stop("plain text, ünïcödé ✓ and more".as_bytes()), None);
    }

    proptest! {
        #[test]
        fn agrees_with_a_byte_at_a_time_scan(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            prop_assert_eq!(find_stop(&bytes), naive(&bytes));
            prop_assert_eq!(find_stop_near(&bytes), naive(&bytes));
        }

        #[test]
        fn agrees_on_text_with_few_stops(text in "[ -~é✓\"\\\\\\n]{0,200}") {
            prop_assert_eq!(find_stop(text.as_bytes()), naive(text.as_bytes()));
        }
    }
}
