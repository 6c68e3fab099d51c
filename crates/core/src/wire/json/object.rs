//! A [`Json`] object: its members in document order, found by a linear scan while it is
//! small and through a key index once it is large.

use std::borrow::Cow;
use std::collections::HashMap;

use super::Json;
use super::scan::word_at;

/// Objects with more members than this also get a key index, so that reading or
/// looking up a large object (a provider may send one) stays linear.
pub(super) const INDEXED_FROM: usize = 16;

/// A member with an empty key and a `null` value, copied from where the constant lies.
const EMPTY_MEMBER: (Cow<'static, str>, Json<'static>) = (Cow::Borrowed(""), Json::Null);

/// An object's members in document order, each key once.
#[derive(Debug, Clone, Default)]
pub struct Object<'a> {
    pub(super) members: Vec<(Cow<'a, str>, Json<'a>)>,
    /// Key → position, only for objects with more than `INDEXED_FROM` members. Boxed:
    /// almost no object has one, and every `Json` is as large as its largest variant.
    #[expect(
        clippy::box_collection,
        reason = "the box keeps the inline size small: one pointer instead of a whole map"
    )]
    pub(super) index: Option<Box<HashMap<String, usize>>>,
}

impl PartialEq for Object<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.members == other.members
    }
}

impl<'a> Object<'a> {
    /// An empty object with room for `members` members (indexed as they come).
    pub fn with_capacity(members: usize) -> Object<'a> {
        Object {
            members: Vec::with_capacity(members),
            index: None,
        }
    }

    /// The value of `key`.
    ///
    /// Inline for the small objects (a scan of a few keys); a large object's index is
    /// read out of line.
    #[inline]
    pub fn get(&self, key: &str) -> Option<&Json<'a>> {
        match &self.index {
            Some(_) => self.get_indexed(key),
            None => self
                .members
                .iter()
                .find(|(k, _)| same_key(k, key))
                .map(|(_, value)| value),
        }
    }

    /// [`Object::get`] through the key index of a large object.
    #[inline(never)]
    fn get_indexed(&self, key: &str) -> Option<&Json<'a>> {
        let at = *self.index.as_ref()?.get(key)?;
        self.members.get(at).map(|(_, value)| value)
    }

    /// The number of members (distinct keys).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the object has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The members in document order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Json<'a>)> {
        self.members.iter().map(|(k, v)| (k.as_ref(), v))
    }

    /// Adds a member; a key already present keeps its position and takes the new value.
    #[inline]
    pub fn insert(&mut self, key: Cow<'a, str>, value: Json<'a>) {
        Json::put(self.slot(key), value);
    }

    /// The place of `key`'s value, holding `null` for the caller to write (with
    /// [`Json::put`]): a key already present keeps its position (its old value is
    /// dropped); a new key is added at the end.
    ///
    /// The reader reads each value straight into its place: building a member on the
    /// stack and moving it into the vector cost more than reading it (the member's
    /// words are copied back right after they were written, in other widths).
    #[inline]
    pub fn slot(&mut self, key: Cow<'a, str>) -> &mut Json<'a> {
        match key {
            Cow::Borrowed(key) => self.slot_borrowed(key),
            // A key with escapes (rare): out of line.
            key => {
                let at = self.slot_rest(key);
                &mut self.members[at].1
            }
        }
    }

    /// [`Object::slot`] for a borrowed key, passed as two words so that a new member
    /// is written in place. A key not yet present in an object of fewer than
    /// `INDEXED_FROM` members (nearly every one) is added here, inline; a repeated key,
    /// and the member that brings the key index, take the out-of-line path.
    #[inline]
    fn slot_borrowed(&mut self, key: &'a str) -> &mut Json<'a> {
        let at = if self.index.is_none()
            && self.members.len() < INDEXED_FROM
            && !self.members.iter().any(|(k, _)| same_key(k, key))
        {
            // The member is pushed as a constant, then its key's two words stored into
            // it: a member built on the stack and copied in with 16-byte loads stalled on
            // the 8-byte stores that had just written it (store forwarding fails): nearly
            // 3 % of the proxy's CPU on four questions in `perf`.
            self.members.push(EMPTY_MEMBER);
            let at = self.members.len() - 1;
            if let Some((Cow::Borrowed(place), _)) = self.members.get_mut(at) {
                *place = key;
            }
            at
        } else {
            self.slot_rest(Cow::Borrowed(key))
        };
        &mut self.members[at].1
    }

    /// [`Object::slot`] beyond its inline case: the position of `key`'s member (found,
    /// its value reset to `null`, or added).
    #[inline(never)]
    fn slot_rest(&mut self, key: Cow<'a, str>) -> usize {
        let existing = match &self.index {
            Some(index) => index.get(key.as_ref()).copied(),
            None => self.members.iter().position(|(k, _)| same_key(k, &key)),
        };
        if let Some(at) = existing {
            self.members[at].1 = Json::Null;
            return at;
        }
        let at = self.members.len();
        if let Some(index) = &mut self.index {
            index.insert(key.to_string(), at);
        }
        self.members.push((key, Json::Null));
        if self.index.is_none() && self.members.len() > INDEXED_FROM {
            let index = self
                .members
                .iter()
                .enumerate()
                .map(|(at, (k, _))| (k.to_string(), at))
                .collect();
            self.index = Some(Box::new(index));
        }
        at
    }
}

/// Whether two keys are equal. Keys of one object mostly differ in length or in their
/// last byte (`q0`, `q1`, ...), so those are compared before the whole key: a linear
/// scan over a small object then rarely calls `memcmp`.
///
/// Keys up to 16 bytes (nearly all) are compared as two overlapping words, without a
/// call to `memcmp`, whose call costs more than such a comparison.
#[inline]
pub(super) fn same_key(a: &str, b: &str) -> bool {
    same_bytes(a.as_bytes(), b.as_bytes())
}

/// [`same_key`] of two byte strings.
#[inline]
pub(super) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() || a.last() != b.last() {
        return false;
    }
    let n = a.len();
    // Equal lengths: the head and tail words of each (overlapping when shorter than
    // two words) cover every byte.
    let half = |bytes: &[u8], at: usize| -> u32 {
        let mut half = [0u8; 4];
        half.copy_from_slice(&bytes[at..at + 4]);
        u32::from_le_bytes(half)
    };
    match n {
        0..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        8..=16 => word_at(a, 0) == word_at(b, 0) && word_at(a, n - 8) == word_at(b, n - 8),
        _ => a == b,
    }
}
