//! The arena half of the reader ([`Doc::read`]): the same one pass as
//! [`Reader::value_into`], each object and array written once into the arena as a slice.
//!
//! Members and items are gathered on two stacks in the arena while their container is
//! read (a nested container's are popped before its own member is pushed) and copied
//! out as one slice when it closes.

use std::borrow::Cow;

use bumpalo::Bump;
use bumpalo::collections::Vec as ArenaVec;

use super::super::doc::Doc;
use super::super::object::same_key;
use super::{MAX_DEPTH, Reader};

pub(crate) mod answers;

/// Most members of an object a [`Doc`] holds: a larger object (and one that repeats a
/// key) is left to [`Json`](super::super::Json), whose large objects are indexed, so that
/// looking up every member stays linear.
pub const MOST_MEMBERS: usize = 32;

/// Room the two stacks are first given (a four-class answer's members and more).
const FIRST_ROOM: usize = 16;

/// Reads a whole document into `arena` (see [`Doc::read`]).
pub(crate) fn document<'a>(bytes: &'a [u8], arena: &'a Bump) -> Option<Doc<'a>> {
    // UTF-8 is checked once, as `read` does and for the same reason.
    let text = simdutf8::basic::from_utf8(bytes).ok()?;
    let mut reader = Reader::new(text, None, false);
    let mut stacks = Stacks::new(arena);
    let value = reader.doc_value(0, &mut stacks)?;
    reader.skip_whitespace();
    (reader.at == bytes.len()).then_some(value)
}

/// A key's bit among an object's keys ([`Reader::doc_object`]'s repeat check): one of 64,
/// by its length and last byte, which [`same_key`] compares first.
#[inline]
fn key_bit(key: &str) -> u64 {
    let last = key.as_bytes().last().copied().unwrap_or(0);
    1 << ((key.len() + usize::from(last)) % 64)
}

/// The arena and the stacks of the containers being read.
struct Stacks<'a> {
    arena: &'a Bump,
    members: ArenaVec<'a, (&'a str, Doc<'a>)>,
    items: ArenaVec<'a, Doc<'a>>,
}

impl<'a> Stacks<'a> {
    /// Empty stacks in `arena`, with the room of [`FIRST_ROOM`].
    fn new(arena: &'a Bump) -> Stacks<'a> {
        Stacks {
            arena,
            members: ArenaVec::with_capacity_in(FIRST_ROOM, arena),
            items: ArenaVec::with_capacity_in(FIRST_ROOM, arena),
        }
    }
}

impl<'a> Reader<'a> {
    fn doc_value(&mut self, depth: usize, stacks: &mut Stacks<'a>) -> Option<Doc<'a>> {
        self.skip_whitespace();
        Some(match self.peek()? {
            b'n' => self.literal(b"null").map(|()| Doc::Null)?,
            b't' => self.literal(b"true").map(|()| Doc::Bool(true))?,
            b'f' => self.literal(b"false").map(|()| Doc::Bool(false))?,
            b'"' => Doc::String(self.doc_string(stacks.arena)?),
            b'-' | b'0'..=b'9' => Doc::Number(self.number()?),
            b'[' if depth < MAX_DEPTH => self.doc_array(depth + 1, stacks)?,
            b'{' if depth < MAX_DEPTH => self.doc_object(depth + 1, stacks)?,
            _ => return None,
        })
    }

    /// A member's value: a string or a number (most members of an answer) read here,
    /// without the call into [`Reader::doc_value`] that reads any other value.
    #[inline(always)]
    fn doc_member_value(&mut self, depth: usize, stacks: &mut Stacks<'a>) -> Option<Doc<'a>> {
        self.skip_whitespace();
        Some(match self.peek()? {
            b'"' => Doc::String(self.doc_string(stacks.arena)?),
            b'-' | b'0'..=b'9' => Doc::Number(self.number()?),
            _ => return self.doc_value(depth, stacks),
        })
    }

    /// A string starting at its opening quote: borrowed from the bytes, or written into
    /// the arena when it holds escapes.
    #[inline(always)]
    fn doc_string(&mut self, arena: &'a Bump) -> Option<&'a str> {
        Some(match self.string()? {
            Cow::Borrowed(text) => text,
            Cow::Owned(text) => arena.alloc_str(&text),
        })
    }

    fn doc_array(&mut self, depth: usize, stacks: &mut Stacks<'a>) -> Option<Doc<'a>> {
        self.at += 1;
        self.skip_whitespace();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(Doc::Array(&[]));
        }
        let start = stacks.items.len();
        loop {
            let item = self.doc_value(depth, stacks)?;
            stacks.items.push(item);
            if !self.more(b']')? {
                break;
            }
        }
        let items = stacks.arena.alloc_slice_copy(&stacks.items[start..]);
        stacks.items.truncate(start);
        Some(Doc::Array(items))
    }

    fn doc_object(&mut self, depth: usize, stacks: &mut Stacks<'a>) -> Option<Doc<'a>> {
        self.at += 1;
        self.skip_whitespace();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(Doc::Object(&[]));
        }
        let start = stacks.members.len();
        // One bit per key read so far, picked by its length and last byte: equal keys
        // share their bit, so a key whose bit is clear repeats none and is not compared.
        let mut seen = 0u64;
        loop {
            self.skip_whitespace();
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.doc_string(stacks.arena)?;
            self.skip_whitespace();
            if self.peek()? != b':' {
                return None;
            }
            self.at += 1;
            let before = &stacks.members[start..];
            let bit = key_bit(key);
            if before.len() == MOST_MEMBERS
                || (seen & bit != 0 && before.iter().any(|(k, _)| same_key(k, key)))
            {
                return None;
            }
            seen |= bit;
            let value = self.doc_member_value(depth, stacks)?;
            stacks.members.push((key, value));
            if !self.more(b'}')? {
                break;
            }
        }
        let members = stacks.arena.alloc_slice_copy(&stacks.members[start..]);
        stacks.members.truncate(start);
        Some(Doc::Object(members))
    }
}
