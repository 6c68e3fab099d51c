//! The offline tools' command glue: argument handling, files, progress bars. `replay` and
//! `simulate` are here; `audit` and `build-codebook`, which have many arguments and outputs,
//! have a module each.

pub(super) mod audit;
mod certify;
pub(super) mod codebook;

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};

use releasegate_core::contract::Contract;
use releasegate_lab::replay;
use releasegate_sim::simulate;
use releasegate_sim::worlds;

use super::error::{Error, ResultExt};

/// Progress of a long offline run, on stderr: a spinner when stderr is a terminal; otherwise
/// (a CI log, a file, a pipe) plain lines, one per phase and at most one count every
/// [`Progress::EVERY`], so a long run shows it is alive without flooding its log. The spinner
/// is cleared when the progress is dropped, so that a command's error (printed once it has
/// returned) never lands behind it.
pub(super) struct Progress {
    bar: Option<ProgressBar>,
    tool: &'static str,
    what: &'static str,
    started: std::time::Instant,
    position: std::cell::Cell<u64>,
    last_line: std::cell::Cell<std::time::Instant>,
}

impl Progress {
    /// How often an unattended run prints its count.
    const EVERY: std::time::Duration = std::time::Duration::from_secs(10);

    pub(super) fn new(tool: &'static str, what: &'static str) -> Progress {
        Progress::to(tool, what, std::io::stderr().is_terminal())
    }

    fn to(tool: &'static str, what: &'static str, terminal: bool) -> Progress {
        let bar = terminal.then(|| {
            let bar = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template(&format!(
                "{{spinner}} {{pos}} {what} ({{per_sec}}) {{elapsed}} {{msg}}"
            )) {
                bar.set_style(style);
            }
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar
        });
        let now = std::time::Instant::now();
        Progress {
            bar,
            tool,
            what,
            started: now,
            position: std::cell::Cell::new(0),
            last_line: std::cell::Cell::new(now),
        }
    }

    pub(super) fn set_position(&self, position: u64) {
        self.position.set(position);
        match &self.bar {
            Some(bar) => bar.set_position(position),
            None if self.last_line.get().elapsed() >= Self::EVERY => self.line(""),
            None => {}
        }
    }

    /// A new phase of the run.
    pub(super) fn set_message(&self, phase: &'static str) {
        match &self.bar {
            Some(bar) => bar.set_message(phase),
            None => self.line(phase),
        }
    }

    pub(super) fn finish_and_clear(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    fn line(&self, phase: &str) {
        self.last_line.set(std::time::Instant::now());
        let separator = if phase.is_empty() { "" } else { ": " };
        eprintln!(
            "{}{separator}{phase} ({} {} read, {:.0?})",
            self.tool,
            self.position.get(),
            self.what,
            self.started.elapsed()
        );
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish_and_clear();
    }
}

/// Loads the configuration for an offline tool and picks a contract.
pub(super) fn contract(config: &Path, name: &str) -> Result<Arc<Contract>, String> {
    let config = releasegate_proxy::load::load_offline(Some(config)).map_err(|e| e.to_string())?;
    config.contract(name).cloned().ok_or_else(|| {
        let known: Vec<&str> = config.contracts().keys().map(String::as_str).collect();
        format!("no contract named `{name}` (known: {})", known.join(", "))
    })
}

/// `releasegate replay`.
pub(super) fn replay_command(
    config: &Path,
    contract_name: &str,
    input: &Path,
    output: &Path,
) -> Result<(), Error> {
    refuse_overwriting(
        output,
        "--out",
        &[(input, "--worlds"), (config, "--config")],
    )?;
    let contract = contract(config, contract_name).or_usage()?;
    let reader = open_worlds(input, std::slice::from_ref(&contract)).or_usage()?;
    let mut writer = create_worlds(output).or_usage()?;
    let bar = Progress::new("replay", "worlds");
    let result = replay::replay(&contract, reader, &mut writer, &mut |n| bar.set_position(n));
    bar.finish_and_clear();
    let summary = result.or_failure()?;
    crate::outln!("{}", serde_json::to_string_pretty(&summary).or_failure()?)?;
    if summary.worlds_read == 0 {
        return Err(Error::usage(format!(
            "{} holds no world: expected saved worlds, one JSON object per line (docs/worlds.md)",
            input.display()
        )));
    }
    if summary.rejected_requests.total == summary.worlds_read {
        return Err(Error::usage(format!(
            "none of the {} worlds fits contract `{contract_name}` (its questions, classes and \
             pinned text): see rejected_requests above",
            summary.worlds_read
        )));
    }
    Ok(())
}

/// `releasegate simulate`.
pub(super) fn simulate_command(
    pairs_per_domain: usize,
    seed: u64,
    output: &Path,
) -> Result<(), Error> {
    if pairs_per_domain == 0 {
        return Err(Error::usage("--pairs-per-domain must be at least 1"));
    }
    let options = simulate::Options {
        pairs_per_domain,
        seed,
    };
    let mut writer = create_worlds(output).or_usage()?;
    let bar = Progress::new("simulate", "worlds");
    for pair in simulate::Generator::new(&options) {
        let worlds = pair.map_err(|error| Error::Failure(error.to_string()))?;
        for world in &worlds {
            writer
                .write(world)
                .map_err(|error| Error::Failure(error.to_string()))?;
        }
        bar.set_position(writer.n_written() as u64);
    }
    bar.finish_and_clear();
    writer.flush().or_failure()?;
    eprintln!(
        "wrote {} worlds to {}",
        writer.n_written(),
        output.display()
    );
    Ok(())
}

/// Refuses an output that is one of the command's inputs (`inputs`: each path and its flag),
/// whatever the spelling: the same path, another path to it, a symbolic or a hard link.
/// Opening it for writing would truncate the input before it is read (`replay`), or write
/// over it what was computed from it; either way the input is lost.
pub(super) fn refuse_overwriting(
    output: &Path,
    output_flag: &str,
    inputs: &[(&Path, &str)],
) -> Result<(), Error> {
    for (input, input_flag) in inputs {
        if same_file(input, output) {
            return Err(Error::usage(format!(
                "{output_flag} {} is the file {input_flag} {} reads: writing it would destroy \
                 the input; choose another output file",
                output.display(),
                input.display()
            )));
        }
    }
    Ok(())
}

/// Whether `a` and `b` are one existing file: the same device and inode on Unix, the same
/// canonical path everywhere. An output that does not exist yet is no input.
fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(a_metadata), Ok(b_metadata)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if (a_metadata.dev(), a_metadata.ino()) == (b_metadata.dev(), b_metadata.ino()) {
            return true;
        }
    }
    #[cfg(not(unix))]
    let _ = (a_metadata, b_metadata);
    matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b)
}

/// The first provider every one of `contracts` answers through, if they share one: a world
/// without `provider` is then that provider's for each of them (`Seen::set_first_provider`).
fn shared_first_provider(contracts: &[Arc<Contract>]) -> Option<&str> {
    let first = contracts.first()?.provider();
    contracts
        .iter()
        .all(|contract| contract.provider() == first)
        .then_some(first)
}

/// Opens a worlds file for streaming reads of the worlds of `contracts`.
fn open_worlds(
    path: &Path,
    contracts: &[Arc<Contract>],
) -> std::io::Result<worlds::Reader<std::io::BufReader<std::fs::File>>> {
    let file = std::fs::File::open(path).map_err(|error| {
        std::io::Error::new(
            error.kind(),
            format!("cannot open {}: {error}", path.display()),
        )
    })?;
    let mut seen = worlds::Seen::default();
    if let Some(first) = shared_first_provider(contracts) {
        seen.set_first_provider(first);
    }
    Ok(worlds::Reader::with_seen(
        std::io::BufReader::new(file),
        seen,
    ))
}

/// Creates (or truncates) a worlds file for streaming writes.
fn create_worlds(
    path: &Path,
) -> std::io::Result<worlds::Writer<std::io::BufWriter<std::fs::File>>> {
    let file = std::fs::File::create(path).map_err(|error| {
        std::io::Error::new(
            error.kind(),
            format!("cannot create {}: {error}", path.display()),
        )
    })?;
    Ok(worlds::Writer::new(std::io::BufWriter::new(file)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_that_is_an_input_by_any_spelling_is_refused() {
        let dir =
            std::env::temp_dir().join(format!("releasegate-same-file-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let input = dir.join("worlds.jsonl");
        std::fs::write(&input, "{}\n").unwrap();
        let other = dir.join("released.jsonl");
        std::fs::write(&other, "").unwrap();
        let inputs = [(input.as_path(), "--worlds")];
        let spellings = [
            input.clone(),
            dir.join("sub").join("..").join("worlds.jsonl"),
            dir.join(".").join("worlds.jsonl"),
        ];
        for spelling in &spellings {
            let refused = refuse_overwriting(spelling, "--out", &inputs);
            assert!(
                matches!(&refused, Err(Error::Usage(m)) if m.contains("is the file --worlds")),
                "{}: {refused:?}",
                spelling.display()
            );
        }
        #[cfg(unix)]
        {
            let symlink = dir.join("link.jsonl");
            std::os::unix::fs::symlink(&input, &symlink).unwrap();
            let hard = dir.join("hard.jsonl");
            std::fs::hard_link(&input, &hard).unwrap();
            for spelling in [&symlink, &hard] {
                assert!(refuse_overwriting(spelling, "--out", &inputs).is_err());
            }
        }
        assert!(refuse_overwriting(&other, "--out", &inputs).is_ok());
        assert!(refuse_overwriting(&dir.join("new.jsonl"), "--out", &inputs).is_ok());
        // The input is untouched.
        assert_eq!(std::fs::read_to_string(&input).unwrap(), "{}\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
