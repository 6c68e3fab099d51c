//! A provider's answer read into an arena: [`Doc`].
//!
//! [`Json`](super::Json) keeps each object's members in a vector of its own, and each
//! of those is allocated, grown and freed with the document; a provider's answer of
//! eight questions holds about twenty of them. A [`Doc`] lives in a bump arena
//! ([`with_arena`]): its objects and arrays are slices written once into the arena,
//! its strings borrow from the bytes read (or from the arena, for a string with
//! escapes), and it owns nothing, so dropping it is free and the arena is reset for
//! the next answer.
//!
//! It is read only where it means exactly what a `serde_json::Value` read from the
//! same bytes means: [`Doc::read`] gives up (`None`) on any object that repeats a key
//! or holds more than [`MOST_MEMBERS`] members, and wherever the one-pass reader gives
//! up (see `read`); the caller then reads the bytes as a [`Json`](super::Json). So a
//! member is found by a short linear scan, and the first key that matches is the only
//! one.

use std::cell::RefCell;

use bumpalo::Bump;
use serde_json::Value;

use super::object::same_key;
use super::{Node, Number};

pub use super::read::doc::MOST_MEMBERS;

/// A JSON document in an arena (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Doc<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(&'a str),
    Array(&'a [Doc<'a>]),
    /// The members in document order, each key once.
    Object(&'a [(&'a str, Doc<'a>)]),
}

impl<'a> Doc<'a> {
    /// Reads a whole document (trailing whitespace allowed) into `arena`, or `None` where
    /// the caller must read it as a [`Json`](super::Json): bytes serde_json refuses, and
    /// the documents this reader leaves to it (see the module's doc).
    pub fn read(bytes: &'a [u8], arena: &'a Bump) -> Option<Doc<'a>> {
        super::read::doc::document(bytes, arena)
    }

    /// The same document as a `serde_json::Value`.
    pub fn to_value(&self) -> Value {
        match *self {
            Doc::Null => Value::Null,
            Doc::Bool(b) => Value::Bool(b),
            Doc::Number(Number::Unsigned(n)) => Value::from(n),
            Doc::Number(Number::Signed(n)) => Value::from(n),
            Doc::Number(Number::Float(f)) => {
                serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
            }
            Doc::String(s) => Value::String(s.to_string()),
            Doc::Array(items) => Value::Array(items.iter().map(Doc::to_value).collect()),
            Doc::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), v.to_value()))
                    .collect(),
            ),
        }
    }
}

impl Node for Doc<'_> {
    #[inline]
    fn member(&self, key: &str) -> Option<&Self> {
        match self {
            Doc::Object(members) => members
                .iter()
                .find(|(k, _)| same_key(k, key))
                .map(|(_, value)| value),
            _ => None,
        }
    }
    /// A `Doc` holds no repeated key (its reader gives up on one), so the member at `at`
    /// with the key is the only one.
    #[inline]
    fn member_near(&self, key: &str, at: usize) -> Option<&Self> {
        match self {
            Doc::Object(members) => match members.get(at) {
                Some((k, value)) if same_key(k, key) => Some(value),
                _ => members
                    .iter()
                    .find(|(k, _)| same_key(k, key))
                    .map(|(_, value)| value),
            },
            _ => None,
        }
    }
    fn object_len(&self) -> Option<usize> {
        match self {
            Doc::Object(members) => Some(members.len()),
            _ => None,
        }
    }
    fn text(&self) -> Option<&str> {
        match self {
            Doc::String(s) => Some(s),
            _ => None,
        }
    }
    fn number(&self) -> Option<f64> {
        match self {
            Doc::Number(n) => Some(n.as_f64()),
            _ => None,
        }
    }
    fn unsigned(&self) -> Option<u64> {
        match self {
            Doc::Number(Number::Unsigned(n)) => Some(*n),
            _ => None,
        }
    }
    fn is_null(&self) -> bool {
        matches!(self, Doc::Null)
    }
}

/// An arena this thread keeps once it has held more than this is dropped rather than
/// reset: one very large answer does not keep its memory for every later one.
const KEPT_ARENA_BYTES: usize = 1 << 20;

/// Runs `f` with this thread's arena, reset when `f` returns (the documents read into
/// it cannot outlive `f`). A nested call gets an arena of its own.
pub fn with_arena<R>(f: impl FnOnce(&Bump) -> R) -> R {
    thread_local! {
        static ARENA: RefCell<Bump> = RefCell::new(Bump::new());
    }
    ARENA.with(|arena| match arena.try_borrow_mut() {
        Ok(mut arena) => {
            let out = f(&arena);
            if arena.allocated_bytes() > KEPT_ARENA_BYTES {
                *arena = Bump::new();
            } else {
                arena.reset();
            }
            out
        }
        Err(_) => f(&Bump::new()),
    })
}
