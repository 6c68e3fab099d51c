//! A provider's answer read without building a `serde_json::Value`.
//!
//! [`Json`] is a JSON document whose strings borrow from the bytes they were read
//! from (when they hold no escapes) and whose objects keep their members in a vector,
//! in document order. Reading one costs no key hashing and no allocation per key,
//! which is most of what a `Value` costs on the proxy's request path.
//!
//! It means the same as a `Value` read from the same bytes: a repeated key keeps its
//! first position and its last value (as `serde_json::Map` does), numbers are read to
//! the same values, and nesting is bounded by the same recursion limit. The proxy's
//! own one-pass reader (`read`) reads well-formed documents; anything it is not sure
//! of goes to serde_json, whose reading (or error) is then the answer. [`Node`] is
//! what the release path reads of either, so the proxy (reading [`Json`]) and the
//! offline tools (reading `Value`s from saved logs) share one validation and release
//! code path.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

pub use doc::{Doc, MOST_MEMBERS, with_arena};
use object::INDEXED_FROM;
pub use object::Object;
#[cfg(test)]
use object::same_key;
pub use read::QuestionsAt;
pub use written::Written;

/// What the release path reads of a JSON document: implemented by `serde_json::Value`
/// and by [`Json`], with the same meaning for both.
pub trait Node {
    /// The member `key` of an object; `None` for a missing key or a non-object.
    fn member(&self, key: &str) -> Option<&Self>;
    /// [`Node::member`], looked for first at position `at` of the object's members in
    /// the order they came (where a reader keeps that order): the same member, found
    /// sooner when keys come in an expected order (an answer's classes).
    fn member_near(&self, key: &str, at: usize) -> Option<&Self> {
        let _ = at;
        self.member(key)
    }
    /// The number of distinct keys of an object; `None` for a non-object.
    fn object_len(&self) -> Option<usize>;
    /// The text of a string.
    fn text(&self) -> Option<&str>;
    /// A number's value as `f64` (`None` for a non-number).
    fn number(&self) -> Option<f64>;
    /// A number's value if it is a non-negative integer that fits `u64`.
    fn unsigned(&self) -> Option<u64>;
    /// Whether this is `null`.
    fn is_null(&self) -> bool;
}

impl Node for Value {
    fn member(&self, key: &str) -> Option<&Value> {
        self.as_object()?.get(key)
    }
    fn object_len(&self) -> Option<usize> {
        self.as_object().map(serde_json::Map::len)
    }
    fn text(&self) -> Option<&str> {
        self.as_str()
    }
    fn number(&self) -> Option<f64> {
        match self {
            Value::Number(n) => n.as_f64(),
            _ => None,
        }
    }
    fn unsigned(&self) -> Option<u64> {
        match self {
            Value::Number(n) => n.as_u64(),
            _ => None,
        }
    }
    fn is_null(&self) -> bool {
        self.is_null()
    }
}

/// A number as serde_json's parser reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// A non-negative integer that fits `u64`.
    Unsigned(u64),
    /// A negative integer that fits `i64`.
    Signed(i64),
    /// Anything else (a fraction, an exponent, an integer too large for 64 bits).
    Float(f64),
}

impl Number {
    /// The value as `f64`, converted as `serde_json::Number::as_f64` does.
    pub fn as_f64(self) -> f64 {
        match self {
            Number::Unsigned(n) => n as f64,
            Number::Signed(n) => n as f64,
            Number::Float(f) => f,
        }
    }
}

/// A request as [`Json::parse_request`] reads it: the document, its `state` as sent, and
/// where its `questions` value was found.
pub type ReadRequest<'a> = (Json<'a>, Option<&'a [u8]>, Option<QuestionsAt>);

/// A JSON document whose strings borrow from its source where they can.
#[derive(Debug, Clone)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    Object(Object<'a>),
    /// A value kept written (`Written`): read as its value, written as its bytes.
    Written(&'a Written),
}

impl<'a> Json<'a> {
    /// Reads a document from `bytes`, as `serde_json::from_slice` would (trailing
    /// whitespace allowed, anything else after the value an error).
    ///
    /// The proxy's own reader (`read`) reads it in one pass; where it gives up (any
    /// error among others), serde_json reads it, so errors are serde_json's.
    pub fn parse(bytes: &'a [u8]) -> serde_json::Result<Json<'a>> {
        match read::document(bytes) {
            Some(json) => Ok(json),
            None => serde_json::from_slice(bytes),
        }
    }

    /// [`Json::parse`], and the bytes of the top-level member `member`'s value as they
    /// stand in `bytes`. `None` when the document is not an object or has no such member,
    /// when an object in it repeats a key (the bytes would hold a member the document
    /// does not keep), and for the documents this crate's reader leaves to serde_json
    /// (nesting deeper than 100, lone surrogate escapes, ...).
    pub fn parse_with_member(
        bytes: &'a [u8],
        member: &'static str,
    ) -> serde_json::Result<(Json<'a>, Option<&'a [u8]>)> {
        match read::document_with_member(bytes, Some(member)) {
            Some((json, span)) => Ok((json, span.and_then(|span| bytes.get(span)))),
            None => serde_json::from_slice(bytes).map(|json| (json, None)),
        }
    }

    /// [`Json::parse_with_member`] for a member whose value is used only as sent (a
    /// request's `state`, which goes upstream byte for byte): where its bytes are given,
    /// its value is checked as any other but not built, and the document holds in its
    /// place an empty value of the same type (`""`, `[]` or `{}`; a number, `true`,
    /// `false` or `null` is kept), enough for a schema check. Where no bytes are given
    /// (no such member, a repeated key, a document left to serde_json), the document is
    /// [`Json::parse_with_member`]'s, whole. A 12 KB `state` of escaped text cost more
    /// to build than the rest of a request.
    pub fn parse_skimming(
        bytes: &'a [u8],
        member: &'static str,
    ) -> serde_json::Result<(Json<'a>, Option<&'a [u8]>)> {
        match read::document_skimming(bytes, member) {
            Some((json, span)) => Ok((json, span.and_then(|span| bytes.get(span)))),
            None => Json::parse_with_member(bytes, member),
        }
    }

    /// A request: [`Json::parse_skimming`] of its `state`, and where its top-level
    /// `questions` value is byte for byte one of `known` (whole JSON objects), that
    /// value stood in for by `{}` and its index given instead of read
    /// ([`QuestionsAt::Known`]); otherwise the value's bytes ([`QuestionsAt::Read`]).
    /// Where the one-pass reader gives up or an object repeats a key, the document is
    /// [`Json::parse_with_member`]'s and nothing is said of `questions`.
    pub fn parse_request(
        bytes: &'a [u8],
        known: &'a [&'a [u8]],
    ) -> serde_json::Result<ReadRequest<'a>> {
        match read::document_request(bytes, known) {
            Some((json, span, questions)) => {
                Ok((json, span.and_then(|span| bytes.get(span)), questions))
            }
            None => {
                Json::parse_with_member(bytes, "state").map(|(json, state)| (json, state, None))
            }
        }
    }

    /// Reads a document with serde_json alone (what [`Json::parse`] falls back to).
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn parse_with_serde(bytes: &'a [u8]) -> serde_json::Result<Json<'a>> {
        serde_json::from_slice(bytes)
    }

    /// The value read: a [`Json::Written`]'s value, anything else itself.
    #[inline]
    pub fn resolved(&self) -> &Json<'a> {
        match self {
            Json::Written(written) => written.value(),
            json => json,
        }
    }

    /// The object, if this is one.
    pub fn as_object(&self) -> Option<&Object<'a>> {
        match self.resolved() {
            Json::Object(object) => Some(object),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub fn as_array(&self) -> Option<&[Json<'a>]> {
        match self.resolved() {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }

    /// A `Value` seen as a `Json`: strings and keys borrowed from it.
    pub fn from_value(value: &'a Value) -> Json<'a> {
        match value {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Number(n) => Json::Number(match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Number::Unsigned(u),
                (None, Some(i)) => Number::Signed(i),
                (None, None) => Number::Float(n.as_f64().unwrap_or(f64::NAN)),
            }),
            Value::String(s) => Json::String(Cow::Borrowed(s)),
            Value::Array(items) => Json::Array(items.iter().map(Json::from_value).collect()),
            Value::Object(map) => Json::from_map(map),
        }
    }

    /// A `serde_json` map seen as a `Json` object: keys and strings borrowed from it.
    pub fn from_map(map: &'a serde_json::Map<String, Value>) -> Json<'a> {
        let mut object = Object::with_capacity(map.len());
        for (key, value) in map {
            object.insert(Cow::Borrowed(key), Json::from_value(value));
        }
        Json::Object(object)
    }

    /// A `Value` turned into a `Json` that owns its strings.
    pub fn from_owned(value: Value) -> Json<'static> {
        match value {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(b),
            Value::String(s) => Json::String(Cow::Owned(s)),
            Value::Array(items) => Json::Array(items.into_iter().map(Json::from_owned).collect()),
            Value::Object(map) => {
                let mut object = Object::with_capacity(map.len());
                for (key, value) in map {
                    object.insert(Cow::Owned(key), Json::from_owned(value));
                }
                Json::Object(object)
            }
            number @ Value::Number(_) => match Json::from_value(&number) {
                Json::Number(n) => Json::Number(n),
                _ => Json::Null,
            },
        }
    }

    /// Writes `value` into `place`, which holds `null` (a new place of an array or
    /// [`Object::slot`]): nothing is dropped, so the write is a plain store.
    #[inline]
    pub fn put(place: &mut Json<'a>, value: Json<'a>) {
        debug_assert!(matches!(place, Json::Null), "a place to fill holds null");
        // `null` owns nothing: forgetting it leaks nothing (and, were the place not
        // `null` after all, forgetting would only leak, never corrupt).
        std::mem::forget(std::mem::replace(place, value));
    }

    /// A string borrowed for the document's lifetime.
    pub fn text(text: &'a str) -> Json<'a> {
        Json::String(Cow::Borrowed(text))
    }

    /// A float as `Value::from(f64)` holds it: `null` when it is not finite.
    pub fn float(x: f64) -> Json<'a> {
        if x.is_finite() {
            Json::Number(Number::Float(x))
        } else {
            Json::Null
        }
    }

    /// The same document as a `serde_json::Value`.
    pub fn to_value(&self) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(Number::Unsigned(n)) => Value::from(*n),
            Json::Number(Number::Signed(n)) => Value::from(*n),
            Json::Number(Number::Float(f)) => {
                serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
            }
            Json::String(s) => Value::String(s.to_string()),
            Json::Array(items) => Value::Array(items.iter().map(Json::to_value).collect()),
            Json::Object(object) => Value::Object(
                object
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_value()))
                    .collect(),
            ),
            Json::Written(written) => written.value().to_value(),
        }
    }
}

/// Equal values are equal however they are held: a [`Json::Written`] is compared by the
/// value its bytes read back as.
impl PartialEq for Json<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self.resolved(), other.resolved()) {
            (Json::Null, Json::Null) => true,
            (Json::Bool(a), Json::Bool(b)) => a == b,
            (Json::Number(a), Json::Number(b)) => a == b,
            (Json::String(a), Json::String(b)) => a == b,
            (Json::Array(a), Json::Array(b)) => a == b,
            (Json::Object(a), Json::Object(b)) => a == b,
            _ => false,
        }
    }
}

impl Node for Json<'_> {
    fn member(&self, key: &str) -> Option<&Self> {
        self.as_object()?.get(key)
    }
    fn object_len(&self) -> Option<usize> {
        self.as_object().map(Object::len)
    }
    fn text(&self) -> Option<&str> {
        match self.resolved() {
            Json::String(s) => Some(s),
            _ => None,
        }
    }
    fn number(&self) -> Option<f64> {
        match self.resolved() {
            Json::Number(n) => Some(n.as_f64()),
            _ => None,
        }
    }
    fn unsigned(&self) -> Option<u64> {
        match self.resolved() {
            Json::Number(Number::Unsigned(n)) => Some(*n),
            _ => None,
        }
    }
    fn is_null(&self) -> bool {
        matches!(self.resolved(), Json::Null)
    }
}

/// An object key, borrowed when it holds no escapes (serde's own `Cow` always copies).
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Json<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json<'de>, E> {
        Ok(Json::Bool(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json<'de>, E> {
        Ok(Json::Number(Number::Unsigned(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json<'de>, E> {
        // serde_json reports non-negative integers through `visit_u64`; this keeps the
        // same split for any other source.
        Ok(Json::Number(match u64::try_from(v) {
            Ok(n) => Number::Unsigned(n),
            Err(_) => Number::Signed(v),
        }))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Json<'de>, E> {
        // serde_json's parser never yields a non-finite number; one from elsewhere
        // becomes null, as it does in a `Value`.
        Ok(if v.is_finite() {
            Json::Number(Number::Float(v))
        } else {
            Json::Null
        })
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Json<'de>, E> {
        Ok(Json::String(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json<'de>, E> {
        Ok(Json::String(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Json<'de>, E> {
        Ok(Json::String(Cow::Owned(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json<'de>, A::Error> {
        let mut object = Object::with_capacity(map.size_hint().unwrap_or(0).min(INDEXED_FROM));
        while let Some(Key(key)) = map.next_key()? {
            let value = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Json::Object(object))
    }
}

mod doc;
mod object;
pub(crate) mod read;
pub(in crate::wire) mod scan;
pub(crate) use scan::is_plain;
pub mod write;
mod written;

#[cfg(test)]
mod tests;
