//! The reader behind [`Json::parse`]: one pass over the bytes, no serde visitor.
//!
//! It accepts exactly what serde_json accepts and reads it to the same document;
//! where it is not sure (nesting deeper than [`MAX_DEPTH`], a number whose value is
//! not finite, a lone surrogate escape, invalid UTF-8, any syntax error) it gives up
//! and [`Json::parse`] asks serde_json, whose answer (document or error, with its
//! line and column) is then the one returned. So an error always comes from
//! serde_json, and a document this reader returns is checked against serde_json's
//! reading of the same bytes by the tests beside it.

use std::borrow::Cow;
use std::ops::Range;

use super::scan::{find_stop, find_stop_near};
use super::{Json, Object};

pub(crate) mod doc;
mod number;
mod skim;

/// Nesting this reader follows itself; deeper documents go to serde_json (whose
/// recursion limit is 128).
const MAX_DEPTH: usize = 100;

/// Members or items a non-empty object or array is first given room for.
const FIRST_ROOM: usize = 4;

/// Reads a whole document (trailing whitespace allowed), or `None` where serde_json
/// must decide.
pub(crate) fn document(bytes: &[u8]) -> Option<Json<'_>> {
    document_with_member(bytes, None).map(|(value, _)| value)
}

/// [`document`], and where the document is an object with a member `member`, where that
/// member's value lies in `bytes`. No place is given when any object of the document
/// repeats a key: the bytes would then hold members the document does not keep.
pub(crate) fn document_with_member<'a>(
    bytes: &'a [u8],
    member: Option<&'static str>,
) -> Option<(Json<'a>, Option<Range<usize>>)> {
    let (value, span, repeated) = read(bytes, member, false)?;
    Some((value, span.filter(|_| !repeated)))
}

/// [`document_with_member`] for a member whose value is only passed on as sent: that
/// value is checked as the reader checks any value, but not built, and the document
/// holds in its place an empty value of the same type (`""`, `[]`, `{}`; a number,
/// `true`, `false` or `null` is kept). `None`, so that the caller reads the document
/// whole, where this reader gives up and also where any object repeats a key, or
/// where the skimmed value has a key it does not compare (one with an escape): a
/// document whose member has no place must be read whole, since its value then goes
/// on as this crate writes it.
pub(crate) fn document_skimming<'a>(
    bytes: &'a [u8],
    member: &'static str,
) -> Option<(Json<'a>, Option<Range<usize>>)> {
    let (value, span, repeated) = read(bytes, Some(member), true)?;
    (!repeated).then_some((value, span))
}

/// Where a request's top-level `questions` value was found by
/// [`Json::parse_request`](super::Json::parse_request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuestionsAt {
    /// Its bytes are exactly `known[i]`'s: the document holds `{}` in its place.
    Known(usize),
    /// Read into the document, from these bytes.
    Read(Range<usize>),
}

/// [`document_skimming`] of a request's `state`, and its `questions`: where a value of
/// `known` (each a whole JSON object the caller read before) stands at the place of the
/// top-level `questions` value, byte for byte, that value is those bytes (reading is
/// deterministic, and an object ends where its bytes end), so it is neither read nor
/// built: the document holds `{}` in its place and the index of the value is given.
/// Otherwise `questions` is read into the document as any member, and its bytes are
/// given. `None` where [`document_skimming`] gives none (a repeated key included).
pub(crate) fn document_request<'a>(
    bytes: &'a [u8],
    known: &'a [&'a [u8]],
) -> Option<(Json<'a>, Option<Range<usize>>, Option<QuestionsAt>)> {
    let text = simdutf8::basic::from_utf8(bytes).ok()?;
    let mut reader = Reader::new(text, Some("state"), true);
    reader.known = Some(known);
    let value = reader.value(0)?;
    reader.skip_whitespace();
    (reader.at == bytes.len() && !reader.repeated).then_some((value, reader.span, reader.questions))
}

/// One reading: the document, where `member`'s value lies, and whether an object
/// repeated a key (or, skimming, might have).
fn read<'a>(
    bytes: &'a [u8],
    member: Option<&'static str>,
    skim: bool,
) -> Option<(Json<'a>, Option<Range<usize>>, bool)> {
    // UTF-8 is checked once, over the whole document: serde_json accepts non-ASCII
    // bytes only inside strings, where they must be UTF-8, and a string (delimited by
    // ASCII quotes) is then a slice of valid text without a check of its own.
    // The same check as `std::str::from_utf8` (valid UTF-8 or nothing), with vector
    // instructions: a long `state` of accented text is several times faster to check.
    let text = simdutf8::basic::from_utf8(bytes).ok()?;
    let mut reader = Reader::new(text, member, skim);
    let value = reader.value(0)?;
    reader.skip_whitespace();
    (reader.at == bytes.len()).then_some((value, reader.span, reader.repeated))
}

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    /// The top-level member whose value's place is wanted.
    member: Option<&'static str>,
    /// Where that value was last read.
    span: Option<Range<usize>>,
    /// Whether an object repeated a key (only tracked while a member is wanted).
    repeated: bool,
    /// Whether the wanted member's value is skimmed (`document_skimming`).
    skim: bool,
    /// The keys of the skimmed objects being read, innermost last.
    keys: Vec<&'a str>,
    /// A request's known `questions` values (`document_request`): `None` when the
    /// `questions` member is read as any other.
    known: Option<&'a [&'a [u8]]>,
    /// Where the top-level `questions` value was found (with `known` only).
    questions: Option<QuestionsAt>,
}

impl<'a> Reader<'a> {
    fn new(text: &'a str, member: Option<&'static str>, skim: bool) -> Reader<'a> {
        Reader {
            text,
            bytes: text.as_bytes(),
            at: 0,
            member,
            span: None,
            repeated: false,
            skim,
            keys: Vec::new(),
            known: None,
            questions: None,
        }
    }

    /// A request's top-level `questions` value into `out` (`document_request`): stood in
    /// for by `{}` when its bytes are a known value's, else read.
    fn questions_into(&mut self, depth: usize, known: &[&[u8]], out: &mut Json<'a>) -> Option<()> {
        let start = self.at;
        let rest = self.bytes.get(start..)?;
        let found = known
            .iter()
            .position(|value| value.first() == Some(&b'{') && rest.starts_with(value));
        match found {
            Some(index) => {
                self.at += known[index].len();
                Json::put(out, Json::Object(Object::default()));
                self.questions = Some(QuestionsAt::Known(index));
            }
            None => {
                self.value_into(depth, out)?;
                self.questions = Some(QuestionsAt::Read(start..self.at));
            }
        }
        Some(())
    }
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// Consumes `word` (the rest of `null`, `true`, `false`).
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at.checked_add(word.len())?;
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    fn value(&mut self, depth: usize) -> Option<Json<'a>> {
        let mut value = Json::Null;
        self.value_into(depth, &mut value)?;
        Some(value)
    }

    /// Reads a value into `out`, its place in an array or object (holding `null`): a
    /// value returned and then moved into its place is copied again right after it was
    /// written, which cost the reader more than the reading.
    fn value_into(&mut self, depth: usize, out: &mut Json<'a>) -> Option<()> {
        self.skip_whitespace();
        let value = match self.peek()? {
            b'n' => self.literal(b"null").map(|()| Json::Null)?,
            b't' => self.literal(b"true").map(|()| Json::Bool(true))?,
            b'f' => self.literal(b"false").map(|()| Json::Bool(false))?,
            b'"' => Json::String(self.string()?),
            b'-' | b'0'..=b'9' => Json::Number(self.number()?),
            b'[' if depth < MAX_DEPTH => self.array(depth + 1)?,
            b'{' if depth < MAX_DEPTH => self.object(depth + 1)?,
            _ => return None,
        };
        Json::put(out, value);
        Some(())
    }

    fn array(&mut self, depth: usize) -> Option<Json<'a>> {
        self.at += 1;
        self.skip_whitespace();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(Json::Array(Vec::new()));
        }
        let mut items = Vec::with_capacity(FIRST_ROOM);
        loop {
            items.push(Json::Null);
            let last = items.len() - 1;
            self.value_into(depth, &mut items[last])?;
            if !self.more(b']')? {
                return Some(Json::Array(items));
            }
        }
    }

    /// After an item of an array or a member of an object: consumes its `,` (`true`,
    /// another follows) or the closing `close` (`false`); `None` for anything else.
    #[inline]
    fn more(&mut self, close: u8) -> Option<bool> {
        self.skip_whitespace();
        let next = self.peek()?;
        if next != b',' && next != close {
            return None;
        }
        self.at += 1;
        Some(next == b',')
    }

    fn object(&mut self, depth: usize) -> Option<Json<'a>> {
        self.at += 1;
        self.skip_whitespace();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(Json::Object(Object::with_capacity(0)));
        }
        // Room for the first members at once (what the first push would make, without
        // the vector's growth path).
        let mut object = Object::with_capacity(FIRST_ROOM);
        loop {
            self.skip_whitespace();
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            self.skip_whitespace();
            if self.peek()? != b':' {
                return None;
            }
            self.at += 1;
            let wanted = depth == 1 && self.member.is_some_and(|member| key == member);
            self.skip_whitespace();
            let start = self.at;
            let members = object.len();
            let known = self.known.filter(|_| depth == 1 && key == "questions");
            if wanted && self.skim {
                self.skim_into(depth, object.slot(key))?;
            } else if let Some(known) = known {
                self.questions_into(depth, known, object.slot(key))?;
            } else {
                self.value_into(depth, object.slot(key))?;
            }
            if wanted {
                self.span = Some(start..self.at);
            }
            // A repeated key adds no member.
            self.repeated |= self.member.is_some() && object.len() == members;
            if !self.more(b'}')? {
                return Some(Json::Object(object));
            }
        }
    }

    /// A string starting at its opening quote: borrowed when it holds no escape. Inlined
    /// where it is read: most strings are short keys and labels, for which a call's
    /// saving and restoring of registers cost as much as the reading.
    #[inline(always)]
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.at += 1;
        let start = self.at;
        let rest = self.bytes.get(start..)?;
        let end = find_stop_near(rest)?;
        match rest[end] {
            b'"' => {
                self.at = start + end + 1;
                self.text.get(start..start + end).map(Cow::Borrowed)
            }
            b'\\' => {
                let mut text = String::with_capacity(end + 16);
                text.push_str(self.text.get(start..start + end)?);
                self.at = start + end;
                self.escaped(text).map(Cow::Owned)
            }
            // A control character inside a string: serde_json refuses it.
            _ => None,
        }
    }

    /// The rest of a string holding escapes, `text` its part read so far.
    fn escaped(&mut self, mut text: String) -> Option<String> {
        loop {
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return Some(text);
                }
                b'\\' => {
                    self.at += 1;
                    let escape = self.peek()?;
                    self.at += 1;
                    match escape {
                        b'"' => text.push('"'),
                        b'\\' => text.push('\\'),
                        b'/' => text.push('/'),
                        b'b' => text.push('\u{8}'),
                        b'f' => text.push('\u{c}'),
                        b'n' => text.push('\n'),
                        b'r' => text.push('\r'),
                        b't' => text.push('\t'),
                        b'u' => text.push(self.unicode_escape()?),
                        _ => return None,
                    }
                }
                b if b < 0x20 => return None,
                _ => {
                    // The run up to the next escape, quote or control character: text
                    // between ASCII delimiters, so whole characters.
                    let start = self.at;
                    let rest = self.bytes.get(start..)?;
                    let run = find_stop(rest).unwrap_or(rest.len());
                    text.push_str(self.text.get(start..start + run)?);
                    self.at = start + run;
                }
            }
        }
    }

    /// The character of a `\u` escape (after its `u`), a surrogate pair read whole.
    fn unicode_escape(&mut self) -> Option<char> {
        let first = self.hex4()?;
        match first {
            0xD800..=0xDBFF => {
                if self.bytes.get(self.at..self.at + 2)? != b"\\u" {
                    return None;
                }
                self.at += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return None;
                }
                let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                char::from_u32(code)
            }
            0xDC00..=0xDFFF => None,
            _ => char::from_u32(first),
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.at..self.at + 4)?;
        let mut code = [0u8; 2];
        hex::decode_to_slice(digits, &mut code).ok()?;
        self.at += 4;
        Some(u32::from(u16::from_be_bytes(code)))
    }
}
