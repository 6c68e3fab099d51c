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
//! - a world another provider answered stops the run too (one file per provider);
//! - what is appended keeps `--out` readable: a request line whose world `--out` holds is
//!   not asked again, and is refused when that world is in another pair, split or domain; a
//!   line whose world would repeat an id or split a pair, with the worlds of `--out` or
//!   with the lines before it, is refused by the same [`Seen`] (the errors file names it).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use releasegate_sim::requests::Line;
use releasegate_sim::worlds::{self, Seen, Split, World, WorldIds};

use super::CollectArgs;
use crate::cli::error::chain;

/// The worlds `--out` already holds, and the checks of the worlds a run appends.
pub(super) struct Existing {
    /// The worlds by id, with what a request line naming one must agree with.
    worlds: HashMap<String, Kept>,
    /// How many they are.
    count: usize,
    /// The readers' checks across worlds: every world of `--out`, then every request line
    /// to ask.
    seen: Seen,
    /// The provider asked: every world appended names it.
    provider: String,
    /// The contract: the domain of a world whose request line names none.
    contract: String,
    /// `--out`, as messages name it.
    out: String,
}

/// A world of `--out`: its line, and the ids the worlds readers check.
struct Kept {
    line: usize,
    pair_id: String,
    split: Split,
    domain: String,
}

/// What to do with a request line.
pub(super) enum Verdict {
    /// Its world is not in `--out`: ask it.
    Ask,
    /// Its world is in `--out` already.
    Skip,
    /// Its world would break the worlds readers' rules: not asked, recorded as `kind`.
    Refuse { kind: &'static str, message: String },
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
    /// Reads `--out` (no world when it does not exist); `provider` is the provider asked
    /// and whether it is the contract's first. A last line cut short is removed, a last line
    /// without its newline is ended; the file is not changed when it is refused. Then ready
    /// to check the lines of `--requests` ([`Existing::check`]).
    pub(super) fn read(args: &CollectArgs, provider: &(String, bool)) -> Result<Existing, String> {
        let path = args.out.as_path();
        let mut seen = Seen::default();
        seen.set_file(path.display().to_string());
        // A world of `--out` without `provider` is the first provider's (`answered_by`
        // refuses it when another is asked).
        if provider.1 {
            seen.set_first_provider(provider.0.clone());
        }
        let mut existing = Existing {
            worlds: HashMap::new(),
            count: 0,
            seen,
            provider: provider.0.clone(),
            contract: args.contract.clone(),
            out: path.display().to_string(),
        };
        existing.read_lines(path, provider)?;
        existing.seen.set_file(args.requests.display().to_string());
        Ok(existing)
    }

    /// Reads the worlds of `path`, repairing its last line.
    fn read_lines(&mut self, path: &Path, provider: &(String, bool)) -> Result<(), String> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
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
                        self.seen
                            .check(&world, number)
                            .map_err(|error| not_resumable(path, &chain(&error)))?;
                        self.keep(world, number);
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
        Ok(())
    }

    /// Keeps `world`, read on `line`.
    fn keep(&mut self, world: World, line: usize) {
        self.count += 1;
        self.worlds.entry(world.world_id).or_insert(Kept {
            line,
            pair_id: world.pair_id,
            split: world.split,
            domain: world.domain,
        });
    }

    /// What to do with request line `number`: skip it when `--out` holds its world, unless
    /// that world is in another pair, split or domain; refuse it when its world would repeat
    /// an id or split a pair (the worlds readers' [`Seen`], holding the worlds of `--out`
    /// and the lines to ask before it); ask it otherwise.
    pub(super) fn check(&mut self, number: usize, line: &Line) -> Verdict {
        let domain = line.domain.as_deref().unwrap_or(&self.contract);
        if let Some(kept) = self.worlds.get(&line.id) {
            if (kept.pair_id.as_str(), kept.split, kept.domain.as_str())
                == (line.pair_id.as_str(), line.split, domain)
            {
                return Verdict::Skip;
            }
            return Verdict::Refuse {
                kind: "conflicts_with_out",
                message: format!(
                    "world `{}` is in {} (line {}) in pair `{}`, split {}, domain `{}`; this \
                     line puts it in pair `{}`, split {}, domain `{domain}`: make them agree \
                     (a world in --out is not asked again)",
                    line.id,
                    self.out,
                    kept.line,
                    kept.pair_id,
                    kept.split,
                    kept.domain,
                    line.pair_id,
                    line.split
                ),
            };
        }
        let ids = WorldIds {
            provider: Some(&self.provider),
            domain,
            world_id: &line.id,
            pair_id: &line.pair_id,
            split: line.split,
        };
        match self.seen.check_ids(number, &ids) {
            Ok(()) => Verdict::Ask,
            Err(error) => Verdict::Refuse {
                kind: match error {
                    worlds::Error::PairAcrossSplits { .. } => "pair_across_splits",
                    _ => "duplicate_id",
                },
                message: error.to_string(),
            },
        }
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
