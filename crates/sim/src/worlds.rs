//! The saved decision log ("worlds") format: JSON Lines, one world per line.
//!
//! A world is one saved System One request, the native answer it received and,
//! when known, evaluator-only labels (`docs/worlds.md`). This module owns
//! the [`World`] type, a streaming [`Reader`] over any `BufRead` and a
//! [`Writer`] that emits one compact JSON line per world.
//!
//! Rules the reader enforces:
//! - every non-blank line must parse as a world; a malformed line is an error
//!   carrying its 1-based line number, never skipped;
//! - blank (whitespace-only) lines carry no world and are skipped, but still
//!   count for line numbers, so a trailing empty line is harmless;
//! - when `labels` is present, `hypotheses` must be two distinct sorted
//!   mechanisms and `S` must be one of them;
//! - world ids are unique and both worlds of a pair share a split ([`Seen`]): a
//!   world breaking either is an error naming both line numbers.
//!
//! Unknown keys survive a read-write cycle: top-level ones through
//! [`World::extra`], label-level ones through [`Labels::extra`], and everything
//! inside `request` and `response` because those stay raw JSON values with their
//! key order. On rewrite the known top-level keys come first in the order of the
//! spec (`world_id`, `pair_id`, `split`, `domain`, `request`, `response`,
//! `labels`, `provider`), followed by the unknown keys in their original order. A
//! `"labels": null` is read as absent and is omitted on rewrite.

use std::fmt;
use std::io::{self, BufRead, Write};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use self::seen::{Seen, WorldIds};

mod seen;

/// One saved decision: a System One request, its answer and optional labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct World {
    /// Unique id of the world, e.g. `delivery-p0007-w1`.
    pub world_id: String,
    /// Groups the two counterfactual worlds of a pair, e.g. `delivery-p0007`.
    /// Used for grouping, splitting and resampling, never as a feature.
    pub pair_id: String,
    /// Which split the world (and its whole pair) belongs to.
    pub split: Split,
    /// Domain id, e.g. `delivery`.
    pub domain: String,
    /// The System One request body exactly as sent.
    pub request: Value,
    /// The System One answer body (native, or released in a released file).
    pub response: Value,
    /// Evaluator-only labels; release-time code must never read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Labels>,
    /// The contract provider that answered (`collect --provider`); absent: the contract's
    /// first provider. A world is released with that provider's codebook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Unknown top-level keys, kept in their original order.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Evaluator-only labels of a world.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Labels {
    /// Id of the question the labels refer to, e.g. `coarse_cause`.
    pub question: String,
    /// `T`: the authorized coarse class.
    #[serde(rename = "T")]
    pub t: String,
    /// `S`: the protected fine mechanism.
    #[serde(rename = "S")]
    pub s: String,
    /// The two registered mechanisms of the pair, sorted.
    #[serde(deserialize_with = "two_hypotheses")]
    pub hypotheses: [String; 2],
    /// Unknown label keys, kept in their original order.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Dataset split of a world; both worlds of a pair share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Training data (decoders, codebooks).
    Train,
    /// Model and hyperparameter selection.
    Validation,
    /// Held-out evaluation.
    Test,
}

/// Errors while reading or writing worlds.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The underlying reader failed.
    #[error("line {line}: read failed")]
    Read {
        /// 1-based line number being read.
        line: usize,
        /// The IO error.
        #[source]
        source: io::Error,
    },
    /// The line is not valid UTF-8.
    #[error("line {line}: not valid utf-8")]
    Utf8 {
        /// 1-based line number.
        line: usize,
    },
    /// The line is not well-formed JSON.
    #[error("line {line}: malformed json")]
    Json {
        /// 1-based line number.
        line: usize,
        /// The parser error (its position is within the line).
        #[source]
        source: serde_json::Error,
    },
    /// The line is JSON but not a world (missing key, wrong type, bad split...).
    #[error("line {line}: not a valid world")]
    Invalid {
        /// 1-based line number.
        line: usize,
        /// What is wrong, e.g. "missing field `split`".
        #[source]
        source: serde_json::Error,
    },
    /// The labels are inconsistent.
    #[error("line {line}: invalid labels: {reason}")]
    Labels {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A world id already read: world ids are unique.
    #[error(
        "line {line}: world id `{world_id}` repeats the world of {first} (world ids are unique)"
    )]
    DuplicateWorldId {
        /// 1-based line number of the second world.
        line: usize,
        /// The id.
        world_id: String,
        /// Where the first world with that id was read (`line 3`, `line 3 of a.jsonl`).
        first: String,
    },
    /// The two worlds of a pair are in different splits: both must be in the same one.
    #[error(
        "line {line}: pair `{pair_id}` has a world in split {split} here and one in split \
         {first_split} on {first} (both worlds of a pair share a split)"
    )]
    PairAcrossSplits {
        /// 1-based line number of the world in another split.
        line: usize,
        /// The pair id.
        pair_id: String,
        /// That world's split.
        split: Split,
        /// The split of the pair's first world.
        first_split: Split,
        /// Where the pair's first world was read (`line 3`, `line 3 of a.jsonl`).
        first: String,
    },
    /// A world could not be serialized.
    #[error("cannot serialize world {world_id}")]
    Serialize {
        /// Id of the world.
        world_id: String,
        /// The serializer error.
        #[source]
        source: serde_json::Error,
    },
    /// Writing failed.
    #[error("write failed")]
    Write(#[source] io::Error),
}

/// Streaming reader yielding one `Result<World, Error>` per non-blank line.
///
/// Every world read is also checked against the worlds read before it ([`Seen`]): a
/// repeated world id, or a pair whose worlds are in different splits, is an error.
/// After a read failure of the underlying reader the iterator ends; parse
/// errors of single lines do not end it, so a caller may collect all of them.
#[derive(Debug)]
pub struct Reader<R> {
    inner: R,
    line: usize,
    buf: Vec<u8>,
    done: bool,
    seen: Seen,
}

/// Writes worlds as compact JSON lines.
#[derive(Debug)]
pub struct Writer<W: Write> {
    inner: W,
    n_written: usize,
}

// === impl World ===

impl World {
    /// Parses one line (without its newline) as a world; `line` is used in errors.
    pub fn from_line(text: &str, line: usize) -> Result<World, Error> {
        let world: World = serde_json::from_str(text).map_err(|source| {
            if source.is_data() {
                Error::Invalid { line, source }
            } else {
                Error::Json { line, source }
            }
        })?;
        if let Some(labels) = &world.labels {
            labels
                .check()
                .map_err(|reason| Error::Labels { line, reason })?;
        }
        Ok(world)
    }

    /// The world as one compact JSON line, without the trailing newline.
    pub fn to_line(&self) -> Result<String, Error> {
        serde_json::to_string(self).map_err(|source| Error::Serialize {
            world_id: self.world_id.clone(),
            source,
        })
    }
}

// === impl Labels ===

impl Labels {
    /// Checks that the hypotheses are two distinct sorted names containing `S`.
    pub fn check(&self) -> Result<(), String> {
        let [first, second] = &self.hypotheses;
        if first >= second {
            return Err(format!(
                "hypotheses must be two distinct names in sorted order, got [{first}, {second}]"
            ));
        }
        if self.s != *first && self.s != *second {
            return Err(format!("S `{}` is not one of the hypotheses", self.s));
        }
        Ok(())
    }
}

/// Reads `labels.hypotheses`: exactly two names. Any other count is an error saying so (read
/// as a fixed array, a third name would be reported as trailing characters).
fn two_hypotheses<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<[String; 2], D::Error> {
    let names = Vec::<String>::deserialize(deserializer)?;
    <[String; 2]>::try_from(names).map_err(|names| {
        serde::de::Error::custom(format_args!(
            "labels.hypotheses must hold the pair's two mechanisms, got {} names",
            names.len()
        ))
    })
}

// === impl Split ===

impl Split {
    /// All splits in canonical order.
    pub const ALL: [Split; 3] = [Split::Train, Split::Validation, Split::Test];

    /// The wire name: `train`, `validation` or `test`.
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Validation => "validation",
            Split::Test => "test",
        }
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl Reader ===

impl<R: BufRead> Reader<R> {
    /// Wraps a buffered reader.
    pub fn new(inner: R) -> Self {
        Reader::with_seen(inner, Seen::default())
    }

    /// Wraps a buffered reader whose worlds follow those `seen` holds (several files read
    /// as one: [`Reader::into_seen`] of the previous file's reader).
    pub fn with_seen(inner: R, seen: Seen) -> Self {
        Reader {
            inner,
            line: 0,
            buf: Vec::new(),
            done: false,
            seen,
        }
    }

    /// The worlds this reader has checked, for the reader of the next file.
    pub fn into_seen(self) -> Seen {
        self.seen
    }

    /// The 1-based number of the last line read (0 before the first).
    pub fn line(&self) -> usize {
        self.line
    }
}

impl<R: BufRead> Iterator for Reader<R> {
    type Item = Result<World, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let (line, text) = match self.next_line()? {
            Ok(found) => found,
            Err(error) => return Some(Err(error)),
        };
        Some(
            World::from_line(&text, line)
                .and_then(|world| self.seen.check(&world, line).map(|()| world)),
        )
    }
}

impl<R: BufRead> Reader<R> {
    /// The next non-blank line and its 1-based number, unparsed (for callers
    /// that parse lines in parallel with [`World::from_line`]).
    pub fn next_line(&mut self) -> Option<Result<(usize, String), Error>> {
        while !self.done {
            self.buf.clear();
            let n_read = match self.inner.read_until(b'\n', &mut self.buf) {
                Ok(n) => n,
                Err(source) => {
                    self.done = true;
                    return Some(Err(Error::Read {
                        line: self.line + 1,
                        source,
                    }));
                }
            };
            if n_read == 0 {
                self.done = true;
                return None;
            }
            self.line += 1;
            let Ok(text) = std::str::from_utf8(&self.buf) else {
                return Some(Err(Error::Utf8 { line: self.line }));
            };
            let text = text.trim_end_matches(['\n', '\r']);
            if text.trim().is_empty() {
                continue;
            }
            return Some(Ok((self.line, text.to_string())));
        }
        None
    }
}

// === impl Writer ===

impl<W: Write> Writer<W> {
    /// Wraps a writer; consider a `BufWriter` for files.
    pub fn new(inner: W) -> Self {
        Writer {
            inner,
            n_written: 0,
        }
    }

    /// Writes one already serialized world line (without its `\n`).
    pub fn write_line(&mut self, line: &str) -> Result<(), Error> {
        self.inner
            .write_all(line.as_bytes())
            .and_then(|()| self.inner.write_all(b"\n"))
            .map_err(Error::Write)?;
        self.n_written += 1;
        Ok(())
    }

    /// Writes one world as a compact JSON line followed by `\n`.
    pub fn write(&mut self, world: &World) -> Result<(), Error> {
        let mut line = world.to_line()?;
        line.push('\n');
        self.inner
            .write_all(line.as_bytes())
            .map_err(Error::Write)?;
        self.n_written += 1;
        Ok(())
    }

    /// Number of worlds written so far.
    pub fn n_written(&self) -> usize {
        self.n_written
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.inner.flush().map_err(Error::Write)
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> Result<W, Error> {
        self.flush()?;
        Ok(self.inner)
    }
}

/// Reads every world of a buffered reader, stopping at the first error.
#[cfg(any(test, feature = "test-support"))]
pub fn read_all<R: BufRead>(reader: R) -> Result<Vec<World>, Error> {
    Reader::new(reader).collect()
}

/// Writes all worlds to `out`, one line each, and flushes.
pub fn write_all<'a, W: Write>(
    out: W,
    worlds: impl IntoIterator<Item = &'a World>,
) -> Result<usize, Error> {
    let mut writer = Writer::new(out);
    for world in worlds {
        writer.write(world)?;
    }
    writer.flush()?;
    Ok(writer.n_written())
}

#[cfg(test)]
mod tests;
