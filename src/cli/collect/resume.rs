//! Resuming `releasegate collect`: the worlds `--out` already holds, read before anything is
//! appended to it.
//!
//! Rules:
//! - a missing `--out` holds no world;
//! - a last line cut short by an interrupted run is removed (with a warning), a whole last
//!   line without its newline is ended before anything is appended;
//! - any other unreadable line stops the run, and so does a world another provider answered
//!   (one file per provider).

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use releasegate_sim::worlds::World;

/// The ids of the worlds already in `path` (none when it does not exist); `provider` is the
/// provider asked and whether it is the contract's first.
pub(super) fn already_collected(
    path: &Path,
    provider: &(String, bool),
) -> Result<HashSet<String>, String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(HashSet::new()),
        Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
    };
    let mut ids = HashSet::new();
    let mut start = 0usize;
    let mut number = 0usize;
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
                    ids.insert(world.world_id);
                }
                if end.is_none() {
                    end_last_line(path)?;
                }
            }
            (Err(_), None) => {
                cut_short(path, number, start)?;
                break;
            }
            (Err(reason), Some(_)) => {
                return Err(format!(
                    "{} is not a worlds file collect can resume: {reason}; collect appends to the worlds it wrote",
                    path.display()
                ));
            }
        }
        start = end.map_or(bytes.len(), |end| end + 1);
    }
    Ok(ids)
}

/// Line `number` of the file: a world, or none when it is blank.
fn parse(text: &[u8], number: usize) -> Result<Option<World>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "not valid utf-8".to_string())?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    World::from_line(text, number)
        .map(Some)
        .map_err(|error| error.to_string())
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
