//! The skimming half of the reader (`document_skimming`): a value checked exactly as
//! [`Reader::value_into`] reads it, `None` where that gives up, and nothing built.

use std::borrow::Cow;

use super::super::object::same_key;
use super::{Json, MAX_DEPTH, Object, Reader, find_stop};

/// Keys of a skimmed object compared one by one; a larger object's are sorted.
const SKIM_COMPARED: usize = 16;

impl<'a> Reader<'a> {
    /// The skimmed member's value into `out` (see
    /// [`document_skimming`](super::document_skimming)): a string, array or object is
    /// checked and an empty one of its type put in its place; any other value is read.
    pub(super) fn skim_into(&mut self, depth: usize, out: &mut Json<'a>) -> Option<()> {
        let stand_in = match self.peek()? {
            b'"' => {
                self.skim_string()?;
                Json::String(Cow::Borrowed(""))
            }
            b'[' if depth < MAX_DEPTH => {
                self.skim_array(depth + 1)?;
                Json::Array(Vec::new())
            }
            b'{' if depth < MAX_DEPTH => {
                self.skim_object(depth + 1)?;
                Json::Object(Object::default())
            }
            _ => return self.value_into(depth, out),
        };
        Json::put(out, stand_in);
        Some(())
    }

    /// Checks one value as [`Reader::value_into`] reads it (`None` exactly where that
    /// gives up), building nothing.
    fn skim_value(&mut self, depth: usize) -> Option<()> {
        self.skip_whitespace();
        match self.peek()? {
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'"' => self.skim_string().map(drop),
            b'-' | b'0'..=b'9' => self.number().map(drop),
            b'[' if depth < MAX_DEPTH => self.skim_array(depth + 1),
            b'{' if depth < MAX_DEPTH => self.skim_object(depth + 1),
            _ => None,
        }
    }

    fn skim_array(&mut self, depth: usize) -> Option<()> {
        self.at += 1;
        self.skip_whitespace();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.skim_value(depth)?;
            if !self.more(b']')? {
                return Some(());
            }
        }
    }

    /// Checks an object, and whether it repeats a key: its keys are kept on
    /// `self.keys` while it is read, compared one by one up to [`SKIM_COMPARED`]
    /// of them and sorted beyond, so that a large object costs no more than reading it.
    fn skim_object(&mut self, depth: usize) -> Option<()> {
        self.at += 1;
        let first = self.keys.len();
        self.skip_whitespace();
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.skip_whitespace();
            if self.peek()? != b'"' {
                return None;
            }
            match self.skim_string()? {
                Some(key) => {
                    let keys = &self.keys[first..];
                    if keys.len() < SKIM_COMPARED && keys.iter().any(|k| same_key(k, key)) {
                        self.repeated = true;
                    }
                    self.keys.push(key);
                }
                // A key with an escape is not compared here: the document is read whole.
                None => self.repeated = true,
            }
            self.skip_whitespace();
            if self.peek()? != b':' {
                return None;
            }
            self.at += 1;
            self.skim_value(depth)?;
            if !self.more(b'}')? {
                break;
            }
        }
        let keys = &mut self.keys[first..];
        if keys.len() > SKIM_COMPARED {
            keys.sort_unstable();
            self.repeated |= keys.windows(2).any(|pair| pair[0] == pair[1]);
        }
        self.keys.truncate(first);
        Some(())
    }

    /// Checks a string starting at its opening quote as [`Reader::string`] reads it;
    /// its text when it holds no escape.
    ///
    /// A string without escapes (keys, most values) ends at the first stop `find_stop`
    /// finds. Past a first escape (free text: quotes, line breaks), only quotes and
    /// backslashes end a run (`memchr2`), and the whole string is tested for a control
    /// character once, at its closing quote: an escape's bytes are never control
    /// characters, so a control character anywhere in the string is one the reader
    /// refuses, and the closing quote is the one the reader finds. Under callgrind the
    /// skim of a 12 KB note with an escape every 65 bytes went from about 38,000
    /// instructions (each run tested on its own) to about 7,000; natively the two are
    /// within noise (the vector code was cheap, the escapes' branches are not).
    fn skim_string(&mut self) -> Option<Option<&'a str>> {
        self.at += 1;
        let start = self.at;
        let rest = self.bytes.get(start..)?;
        self.at += find_stop(rest)?;
        match self.bytes[self.at] {
            b'"' => {
                let end = self.at;
                self.at += 1;
                return Some(self.text.get(start..end));
            }
            b'\\' => {}
            // A control character inside a string: serde_json refuses it.
            _ => return None,
        }
        // At a backslash.
        loop {
            self.at += 1;
            let escape = self.peek()?;
            self.at += 1;
            match escape {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                b'u' => {
                    self.unicode_escape()?;
                }
                _ => return None,
            }
            let rest = self.bytes.get(self.at..)?;
            self.at += memchr::memchr2(b'"', b'\\', rest)?;
            if self.bytes[self.at] == b'"' {
                let end = self.at;
                self.at += 1;
                let control = self.bytes[start..end]
                    .iter()
                    .fold(false, |any, &byte| any | (byte < 0x20));
                return (!control).then_some(None);
            }
        }
    }
}
