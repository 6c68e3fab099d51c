//! Resuming `releasegate collect`: the worlds `--out` already holds, read before anything is
//! appended to it.
//!
//! Rules:
//! - a missing `--out` holds no world;
//! - `--out` must be a file every worlds reader reads: its worlds are checked as the reader
//!   checks them (`releasegate_sim::worlds`: each line a world, its labels, then
//!   [`Seen`]: no repeated world id, no pair across splits), and the first line that fails
//!   stops the run (exit 64), named with its cause;
//! - the one exception is a last line cut short by an interrupted run (it ends in the middle
//!   of its JSON): it is removed, with a warning; a whole last line without its newline is
//!   ended before anything is appended;
//! - a world another provider answered stops the run too (one file per provider).

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use releasegate_sim::worlds::{self, Seen, World};

use crate::cli::error::chain;

/// The worlds `--out` already holds.
pub(super) struct Existing {
    /// Their ids.
    ids: HashSet<String>,
    /// How many they are (two worlds may share an id: one without `provider`, one naming
    /// the contract's first provider).
    count: usize,
    /// The readers' checks across worlds, holding every world of `--out`.
    seen: Seen,
}

/// A line of `--out` that is not a world.
struct Unreadable {
    /// What is wrong, with the line's number.
    cause: String,
    /// The line ends in the middle of its JSON (or of a character): what an interrupted
    /// write leaves.
    cut_short: bool,
}

impl Existing {
    /// Reads `path` (no world when it does not exist); `provider` is the provider asked and
    /// whether it is the contract's first. A last line cut short is removed, a last line
    /// without its newline is ended; the file is not changed when it is refused.
    pub(super) fn read(path: &Path, provider: &(String, bool)) -> Result<Existing, String> {
        let mut seen = Seen::default();
        seen.set_file(path.display().to_string());
        let mut existing = Existing {
            ids: HashSet::new(),
            count: 0,
            seen,
        };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(existing),
            Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        };
        let (mut start, mut number) = (0usize, 0usize);
        while start < bytes.len() {
            number += 1;
            let end = bytes[start..]
                .iter()
                .position(|b| *b == b'\n')
                .map(|at| start + at);
            match (
                parse(&bytes[start..end.unwrap_or(bytes.len())], number),
                end,
            ) {
                (Ok(world), end) => {
                    if let Some(world) = world {
                        answered_by(path, number, &world, provider)?;
                        existing
                            .seen
                            .check(&world, number)
                            .map_err(|error| not_resumable(path, &chain(&error)))?;
                        existing.ids.insert(world.world_id);
                        existing.count += 1;
                    }
                    if end.is_none() {
                        end_last_line(path)?;
                    }
                }
                (Err(line), None) if line.cut_short => {
                    cut_short(path, number, start)?;
                    break;
                }
                (Err(line), _) => return Err(not_resumable(path, &line.cause)),
            }
            start = end.map_or(bytes.len(), |end| end + 1);
        }
        Ok(existing)
    }

    /// Whether `--out` holds the world `id`.
    pub(super) fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    /// How many worlds `--out` holds.
    pub(super) fn len(&self) -> usize {
        self.count
    }
}

/// Line `number` of the file: a world as the readers read it, or none when it is blank.
fn parse(text: &[u8], number: usize) -> Result<Option<World>, Unreadable> {
    let text = std::str::from_utf8(text).map_err(|error| Unreadable {
        cause: worlds::Error::Utf8 { line: number }.to_string(),
        cut_short: error.error_len().is_none(),
    })?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    World::from_line(text, number)
        .map(Some)
        .map_err(|error| Unreadable {
            cut_short: matches!(&error, worlds::Error::Json { source, .. } if source.is_eof()),
            cause: chain(&error),
        })
}

/// The error refusing `path`, whose line `cause` names is not what a reader reads.
fn not_resumable(path: &Path, cause: &str) -> String {
    format!(
        "{} is not a worlds file collect can resume: {cause}; the worlds readers (build-codebook, \
         replay, audit) refuse it too: fix that line, or collect into another --out",
        path.display()
    )
}

/// Refuses a world another provider answered: collect each provider into its own file. A
/// world without `provider` is the contract's first provider's.
fn answered_by(
    path: &Path,
    number: usize,
    world: &World,
    (provider, is_first): &(String, bool),
) -> Result<(), String> {
    let answered_by = world.provider.as_deref();
    if answered_by.map_or(*is_first, |p| p == provider) {
        return Ok(());
    }
    Err(format!(
        "{} line {number}: world `{}` was answered by {}, not `{provider}`: collect each provider into its own file",
        path.display(),
        world.world_id,
        answered_by.map_or_else(
            || "the contract's first provider".to_string(),
            |p| format!("`{p}`")
        )
    ))
}

/// Ends a whole last line that lacks its newline, before anything is appended.
fn end_last_line(path: &Path) -> Result<(), String> {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(b"\n"))
        .map_err(|error| format!("cannot repair {}: {error}", path.display()))
}

/// Removes line `number`, cut short by an interrupted run, which starts at byte `start`.
fn cut_short(path: &Path, number: usize, start: usize) -> Result<(), String> {
    eprintln!(
        "warning: {} line {number} is cut short (an interrupted run); removing it",
        path.display()
    );
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|file| file.set_len(start as u64))
        .map_err(|error| format!("cannot repair {}: {error}", path.display()))
}
