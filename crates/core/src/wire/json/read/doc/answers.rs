//! A provider's response read with its choice and score answers straight into class
//! vectors ([`document`]), where reading it as a [`Doc`] and then each answer with
//! [`parse_answer`](crate::wire::parse_answer) would build every answer's members in the
//! arena only to look each of them up again.
//!
//! It reads only what the two-step path would read to the same vectors, and gives up
//! (`None`) on everything else, for that path to decide: any object that repeats a key or
//! holds more than [`MOST_MEMBERS`] members (where `Doc::read` gives up too), an answer
//! to a question not asked or asked and not answered, and every answer that path would
//! refuse (a missing or mistyped field, a class missing or not asked, a probability or
//! confidence out of [0, 1], a choice that is not the most probable, a sum off by more
//! than the tolerance). So a vector it returns is the one `parse_answer` returns for the
//! same bytes: the tests and a fuzz target hold the two paths to that.
//!
//! The strings it expects (the answers' field names, the asked ids, the classes) are
//! first compared with the bytes as they stand: a string whose bytes are plain content
//! (`is_plain`) and a closing quote is exactly that content. Any other spelling (an
//! escape) is read as a string and compared by its content, as `Doc::read` reads it.
//! Every other member, at any depth, is read as `Doc::read` reads it (the same checks,
//! the same depth limit); the top-level ones (`model`, `usage`, any other) are kept as a
//! [`Doc`] object, in which the `answers` member stands as an empty object.

use bumpalo::Bump;

use super::super::super::doc::Doc;
use super::super::super::object::{same_bytes, same_key};
use super::super::super::scan::is_plain;
use super::{MOST_MEMBERS, Reader, Stacks, key_bit};
use crate::mechanism::ClassVector;
use crate::wire::Kind;
use crate::wire::answer::unit;
use fields::{Choice, Field, Fields, vector};

mod fields;

/// One asked question as its answer is read: its id, its type (choice or score) and its
/// classes in the contract's order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected<'r> {
    pub(crate) id: &'r str,
    pub(crate) kind: Kind,
    pub(crate) classes: &'r [String],
    /// Whether every class is plain string content (`QuestionRule::plain_classes`).
    pub(crate) plain_classes: bool,
}

/// A response read by [`document`]: its top-level members (`answers` standing as an empty
/// object) and one class vector per expected answer, in the order expected.
#[derive(Debug)]
pub(crate) struct Read<'a> {
    pub(crate) top: Doc<'a>,
    pub(crate) vectors: Vec<ClassVector>,
}

/// Reads a whole response (see the module's doc), `None` where the two-step path must.
/// Only choice and score answers are read here: any other expected kind gives `None`.
pub(crate) fn document<'a>(
    bytes: &'a [u8],
    arena: &'a Bump,
    expected: &[Expected<'_>],
) -> Option<Read<'a>> {
    if expected
        .iter()
        .any(|e| !matches!(e.kind, Kind::Choice | Kind::Score))
    {
        return None;
    }
    let text = simdutf8::basic::from_utf8(bytes).ok()?;
    let mut reader = Reader::new(text, None, false);
    let mut stacks = Stacks::new(arena);
    let mut vectors: Vec<Option<ClassVector>> = vec![None; expected.len()];
    reader.skip_whitespace();
    if reader.peek()? != b'{' {
        return None;
    }
    let top = reader.top_object(&mut stacks, expected, &mut vectors)?;
    reader.skip_whitespace();
    if reader.at != bytes.len() {
        return None;
    }
    let vectors = vectors.into_iter().collect::<Option<Vec<_>>>()?;
    Some(Read { top, vectors })
}

/// The keys of one object other than the fields of [`Field`], for the repeated-key
/// check `Doc::read` makes (a key equal to a field's name is that field).
/// Empty until an unknown key comes (no allocation: nearly every answer has none).
struct Others<'a> {
    keys: Vec<&'a str>,
    seen: u64,
}

impl<'a> Others<'a> {
    fn new() -> Others<'a> {
        Others {
            keys: Vec::new(),
            seen: 0,
        }
    }

    /// Adds `key`; `None` where it repeats one, or past `MOST_MEMBERS` keys.
    fn add(&mut self, key: &'a str) -> Option<()> {
        let bit = key_bit(key);
        if self.seen & bit != 0 && self.keys.iter().any(|k| same_key(k, key)) {
            return None;
        }
        if self.keys.len() >= MOST_MEMBERS {
            return None;
        }
        self.seen |= bit;
        self.keys.push(key);
        Some(())
    }
}

impl<'a> Reader<'a> {
    /// Whether the string at the reader (at its quote) is `plain` (plain content), by its
    /// bytes: if so it is passed, with the colon after it when `key`.
    #[inline(always)]
    fn at_plain(&mut self, plain: &[u8]) -> bool {
        let start = self.at + 1;
        let end = start + plain.len();
        // The closing quote first: a string of another length is told by one byte.
        let found = self.bytes.get(end) == Some(&b'"')
            && self
                .bytes
                .get(start..end)
                .is_some_and(|window| same_bytes(window, plain));
        if found {
            self.at = end + 1;
        }
        found
    }

    /// After a member's key: its colon, the reader then at the value.
    #[inline(always)]
    fn colon(&mut self) -> Option<()> {
        self.skip_whitespace();
        if self.peek()? != b':' {
            return None;
        }
        self.at += 1;
        self.skip_whitespace();
        Some(())
    }

    /// A member's key, which must be the name of one of `items` (`name`: its name and
    /// whether that is plain content), and its colon: the index of that item, the reader
    /// then at the value. `items[likely]` is compared with the bytes first; any other key
    /// is read and found by its content.
    #[inline(always)]
    fn key_among<T>(
        &mut self,
        arena: &'a Bump,
        items: &[T],
        likely: usize,
        name: impl Fn(&T) -> (&str, bool),
    ) -> Option<usize> {
        self.skip_whitespace();
        if self.peek()? != b'"' {
            return None;
        }
        let index = match items.get(likely).map(&name) {
            Some((text, true)) if self.at_plain(text.as_bytes()) => likely,
            _ => {
                let key = self.doc_string(arena)?;
                items.iter().position(|item| same_key(name(item).0, key))?
            }
        };
        self.colon()?;
        Some(index)
    }

    /// A member's key and its colon, the reader then at the value.
    #[inline]
    fn member_key(&mut self, arena: &'a Bump) -> Option<&'a str> {
        self.skip_whitespace();
        if self.peek()? != b'"' {
            return None;
        }
        let key = self.doc_string(arena)?;
        self.colon()?;
        Some(key)
    }

    /// The top-level object (at its `{`), its `answers` read by [`Reader::answers`].
    fn top_object(
        &mut self,
        stacks: &mut Stacks<'a>,
        expected: &[Expected<'_>],
        vectors: &mut [Option<ClassVector>],
    ) -> Option<Doc<'a>> {
        const DEPTH: usize = 1;
        self.at += 1;
        let mut answered = false;
        loop {
            let key = self.member_key(stacks.arena)?;
            let before = &stacks.members[..];
            if before.len() == MOST_MEMBERS || before.iter().any(|(k, _)| same_key(k, key)) {
                return None;
            }
            let value = if same_key(key, "answers") {
                if self.peek()? != b'{' {
                    return None;
                }
                self.answers(DEPTH + 1, stacks, expected, vectors)?;
                answered = true;
                Doc::Object(&[])
            } else {
                self.doc_member_value(DEPTH, stacks)?
            };
            stacks.members.push((key, value));
            if !self.more(b'}')? {
                break;
            }
        }
        let members = stacks.arena.alloc_slice_copy(&stacks.members);
        stacks.members.clear();
        answered.then_some(Doc::Object(members))
    }

    /// The `answers` object (at its `{`, `depth` its own): each member the answer to the
    /// expected question of its id, into that question's place in `vectors`.
    fn answers(
        &mut self,
        depth: usize,
        stacks: &mut Stacks<'a>,
        expected: &[Expected<'_>],
        vectors: &mut [Option<ClassVector>],
    ) -> Option<()> {
        self.at += 1;
        let mut count = 0;
        loop {
            // Answers most often come in the order asked.
            let index =
                self.key_among(stacks.arena, expected, count, |e| (e.id, is_plain(e.id)))?;
            count += 1;
            // No repeated id (its place is taken) and at most as many as `Doc::read`
            // keeps: each id is one expected question's.
            let place = vectors.get_mut(index)?;
            if place.is_some() || count > MOST_MEMBERS || self.peek()? != b'{' {
                return None;
            }
            let question = expected.get(index)?;
            *place = Some(self.answer(depth + 1, stacks, question)?);
            if !self.more(b'}')? {
                return Some(());
            }
        }
    }

    /// One answer object (at its `{`, `depth` its own) into its class vector, as
    /// `parse_answer` reads it; `None` for anything that reading would refuse.
    fn answer(
        &mut self,
        depth: usize,
        stacks: &mut Stacks<'a>,
        question: &Expected<'_>,
    ) -> Option<ClassVector> {
        self.at += 1;
        let mut others = Others::new();
        let mut count = 0;
        let mut fields = Fields {
            seen: 0,
            kind: None,
            choice: None,
            score: false,
            confidence: None,
            probabilities: None,
        };
        loop {
            self.skip_whitespace();
            if self.peek()? != b'"' {
                return None;
            }
            // The fields' names differ in their first letter but for `choice` and
            // `confidence`: only the names it could be are compared.
            let named = match self.bytes.get(self.at + 1) {
                Some(b't') => self.at_plain(b"type").then_some(Field::Type),
                Some(b'c') if self.at_plain(b"choice") => Some(Field::Choice),
                Some(b'c') => self.at_plain(b"confidence").then_some(Field::Confidence),
                Some(b'p') => self
                    .at_plain(b"probabilities")
                    .then_some(Field::Probabilities),
                Some(b's') => self.at_plain(b"score").then_some(Field::Score),
                _ => None,
            };
            let field = match named {
                Some(field) => Some(field),
                None => {
                    let key = self.doc_string(stacks.arena)?;
                    let field = Field::NAMES
                        .iter()
                        .find(|(_, name)| same_key(name, key))
                        .map(|&(field, _)| field);
                    if field.is_none() {
                        others.add(key)?;
                    }
                    field
                }
            };
            self.colon()?;
            count += 1;
            if count > MOST_MEMBERS {
                return None;
            }
            match field {
                Some(field) if fields.seen & field.bit() != 0 => return None,
                Some(field) => {
                    fields.seen |= field.bit();
                    self.answer_field(depth, stacks, question, field, &mut fields)?;
                }
                None => {
                    self.doc_member_value(depth, stacks)?;
                }
            }
            if !self.more(b'}')? {
                break;
            }
        }
        vector(question, fields)
    }

    /// One field of an answer, read into `fields` where the class vector is made of it,
    /// else (a field of the other question type) read as `Doc::read` reads any value.
    #[inline]
    fn answer_field(
        &mut self,
        depth: usize,
        stacks: &mut Stacks<'a>,
        question: &Expected<'_>,
        field: Field,
        fields: &mut Fields<'a>,
    ) -> Option<()> {
        match (field, question.kind) {
            (Field::Probabilities, _) => {
                if self.peek()? != b'{' {
                    return None;
                }
                fields.probabilities = Some(self.probabilities(stacks.arena, question)?);
            }
            (Field::Type, _) => {
                fields.kind = Some(
                    if self.peek()? == b'"' && self.at_plain(question.kind.as_str().as_bytes()) {
                        question.kind.as_str()
                    } else {
                        self.text(stacks.arena)?
                    },
                );
            }
            (Field::Confidence, _) => {
                fields.confidence = match self.peek()? {
                    b'n' => self.literal(b"null").map(|()| None)?,
                    _ => Some(self.unit_number()?),
                };
            }
            (Field::Choice, Kind::Choice) => {
                if self.peek()? != b'"' {
                    return None;
                }
                let plain = question.plain_classes;
                let class = question
                    .classes
                    .iter()
                    .position(|class| plain && self.at_plain(class.as_bytes()));
                fields.choice = Some(match class {
                    Some(class) => Choice::Class(class),
                    None => Choice::Label(self.doc_string(stacks.arena)?),
                });
            }
            (Field::Score, Kind::Score) => {
                let score = self.number()?.as_f64();
                fields.score = score.is_finite();
            }
            _ => {
                self.doc_member_value(depth, stacks)?;
            }
        }
        Some(())
    }

    /// A string value (at its quote); `None` for any other value.
    #[inline]
    fn text(&mut self, arena: &'a Bump) -> Option<&'a str> {
        if self.peek()? != b'"' {
            return None;
        }
        self.doc_string(arena)
    }

    /// A number in [0, 1] (`-0` read as `0`, as `parse_answer` reads it); `None` for
    /// any other value.
    #[inline]
    fn unit_number(&mut self) -> Option<f64> {
        // `0.` and a few digits: in [0, 1), and read as `Reader::number` reads it.
        if let Some(value) = self.short_fraction() {
            return Some(value);
        }
        if !matches!(self.peek()?, b'-' | b'0'..=b'9') {
            return None;
        }
        unit(self.number()?.as_f64()).ok()
    }

    /// A `probabilities` object (at its `{`): exactly the question's classes, each once,
    /// each with a number in [0, 1], in the classes' order. Its values are numbers, so
    /// its depth is not needed.
    fn probabilities(&mut self, arena: &'a Bump, question: &Expected<'_>) -> Option<Vec<f64>> {
        self.at += 1;
        let classes = question.classes;
        let mut values = vec![f64::NAN; classes.len()];
        let mut count = 0;
        loop {
            // Most providers list the classes in the question's order.
            let plain = question.plain_classes;
            let index = self.key_among(arena, classes, count, |class| (class, plain))?;
            count += 1;
            let value = values.get_mut(index)?;
            // A class given twice: `Doc::read` gives up on the repeated key.
            if !value.is_nan() || count > MOST_MEMBERS {
                return None;
            }
            *value = self.unit_number()?;
            if !self.more(b'}')? {
                break;
            }
        }
        // Every class given once each (no value is NaN once read).
        (count == classes.len()).then_some(values)
    }
}
