//! `releasegate collect`: ask a contract's provider (`--provider`, default its first) every
//! request of a requests file and write the native answers as worlds, each naming the
//! provider (`docs/collect.md`). The glue only: the requests
//! file's format and its worlds are `releasegate_sim::requests`, the provider call (request
//! check, upstream client, retries, answer validation) is `releasegate_proxy::collect`.
//!
//! Rules:
//! - a world goes to `--out` as soon as its answer arrives (completion order), one line,
//!   flushed; the file is appended to, created with mode 0600 (it holds native answers);
//! - resumable (`resume`): ids already in `--out` are not asked again; a torn last line (an
//!   interrupted write) is cut off with a warning, any other line the worlds readers refuse
//!   (a repeated world id, a pair across splits too) stops the run, and so does a world
//!   another provider answered (one file per provider);
//! - every line that yields no world is recorded in the errors file (`--errors`, default
//!   `OUT.errors.jsonl`, rewritten by every run: it lists the failures of the latest run,
//!   which a rerun asks again), with its line number, id, error kind and message;
//! - exit 0 when every request of the file is in `--out`, 75 (EX_TEMPFAIL) when some failed
//!   (rerun to retry them), 1 when `--out` holds no world at all, 64 on unusable arguments.

mod resume;

use std::collections::{BTreeMap, HashSet};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use releasegate_proxy::collect::{Collected, Collector, Failure};
use releasegate_sim::requests::Line;
use releasegate_sim::worlds::World;

use super::error::{Error, ResultExt};
use resume::Verdict;

/// Exit status when some requests failed and a rerun may collect them (EX_TEMPFAIL).
pub(super) const EXIT_PARTIAL: u8 = 75;

/// Arguments of `releasegate collect`.
#[derive(Debug, clap::Args)]
pub(super) struct CollectArgs {
    /// Configuration file holding the contract and its provider (codebooks are not loaded;
    /// the provider key is read from the environment, as by `serve`).
    #[arg(long)]
    pub config: PathBuf,
    /// The contract whose questions are asked and whose provider answers.
    #[arg(long)]
    pub contract: String,
    /// The contract's provider to ask (default: its first); each world names it.
    #[arg(long)]
    pub provider: Option<String>,
    /// Requests file: one `{"id": ..., "request": {...}}` per line, optional labels.
    #[arg(long)]
    pub requests: PathBuf,
    /// Output worlds file (appended to; ids already in it are skipped).
    #[arg(long)]
    pub out: PathBuf,
    /// Errors file (default: OUT.errors.jsonl), rewritten by every run.
    #[arg(long)]
    pub errors: Option<PathBuf>,
    /// Requests in flight at once (at most the provider's `max_concurrency`).
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Retries of a transient failure (timeout, connection, 429, 529, 5xx).
    #[arg(long, default_value_t = 2)]
    pub retries: u32,
}

/// `releasegate collect`.
pub(super) fn collect_command(args: &CollectArgs) -> Result<ExitCode, Error> {
    if args.concurrency == 0 {
        return Err(Error::usage("--concurrency must be at least 1"));
    }
    let config = releasegate_proxy::load::load_for_collect(&args.config).or_usage()?;
    let collector = Collector::new(
        &config,
        &args.contract,
        args.provider.as_deref(),
        args.retries,
    )
    .or_usage()?;
    let first = config
        .contract(&args.contract)
        .map_or("", |contract| contract.provider());
    let provider = (
        collector.provider().to_string(),
        first == collector.provider(),
    );
    let errors_path = args.errors.clone().unwrap_or_else(|| {
        let mut name = args.out.as_os_str().to_owned();
        name.push(".errors.jsonl");
        PathBuf::from(name)
    });
    let mut existing = resume::Existing::read(args, &provider).or_usage()?;
    let text = std::fs::read_to_string(&args.requests).map_err(|error| {
        Error::usage(format!("cannot read {}: {error}", args.requests.display()))
    })?;
    let mut errors = Errors::create(&errors_path).or_usage()?;
    let mut requests = Requests::read(&text, &mut existing, &mut errors);
    if requests.lines == 0 {
        return Err(Error::usage(format!(
            "{} holds no request line: expected one JSON object per line, \
             {{\"id\": ..., \"request\": {{a System One request}}}} (docs/collect.md)",
            args.requests.display()
        )));
    }
    let concurrency = concurrency(args, &collector);
    eprintln!(
        "collect: {} requests to ask ({} already in {}, {} unusable lines), concurrency {concurrency}",
        requests.todo.len(),
        requests.skipped,
        args.out.display(),
        errors.count
    );
    let out = open_out(&args.out).or_usage()?;
    let asked = ask_all(
        args,
        collector,
        std::mem::take(&mut requests.todo),
        concurrency,
        out,
        &mut errors,
    )?;
    errors.finish().or_usage()?;
    let in_out = existing.len() + asked.collected;
    print_summary(
        args,
        &provider.0,
        &errors_path,
        &requests,
        &asked,
        &errors,
        in_out,
    )?;
    outcome(&errors_path, &requests, &errors, in_out)
}

/// `--concurrency`, at most the provider's `max_concurrency`.
fn concurrency(args: &CollectArgs, collector: &Collector) -> usize {
    match collector.max_concurrency() {
        Some(max) if max < args.concurrency => {
            eprintln!(
                "note: --concurrency {} is above the provider's max_concurrency {max}; using {max}",
                args.concurrency
            );
            max
        }
        _ => args.concurrency,
    }
}

/// The run's JSON summary on stdout; `in_out` counts the worlds now in `--out`.
fn print_summary(
    args: &CollectArgs,
    provider: &str,
    errors_path: &Path,
    requests: &Requests,
    asked: &Asked,
    errors: &Errors,
    in_out: usize,
) -> Result<(), Error> {
    let summary = json!({
        "out": args.out.display().to_string(),
        "errors": errors_path.display().to_string(),
        "contract": args.contract,
        "provider": provider,
        "request_lines": requests.lines,
        "collected": asked.collected,
        "already_collected": requests.skipped,
        "retried": asked.retried,
        "failed": errors.count,
        "failures": errors.kinds,
        "worlds_in_out": in_out,
    });
    crate::outln!(
        "{}",
        serde_json::to_string_pretty(&summary).unwrap_or_default()
    )
}

/// Exit 0 when every request is in `--out`, [`EXIT_PARTIAL`] when some failed, a failure
/// when `--out` holds no world at all.
fn outcome(
    errors_path: &Path,
    requests: &Requests,
    errors: &Errors,
    in_out: usize,
) -> Result<ExitCode, Error> {
    if in_out == 0 {
        return Err(Error::Failure(format!(
            "nothing was collected: all {} request lines failed (see {})",
            requests.lines,
            errors_path.display()
        )));
    }
    if errors.count > 0 {
        eprintln!(
            "warning: {} request lines yielded no world (see {}); rerun the same command to retry them",
            errors.count,
            errors_path.display()
        );
        return Ok(ExitCode::from(EXIT_PARTIAL));
    }
    Ok(ExitCode::SUCCESS)
}

/// The requests file's lines: what is left to ask.
struct Requests {
    /// Non-blank lines.
    lines: usize,
    /// Lines whose id is already in `--out`.
    skipped: usize,
    /// The lines to ask, with their line numbers.
    todo: Vec<(usize, Line)>,
}

impl Requests {
    /// Reads the requests file's `text`; an unusable line, a repeated id or a world that
    /// `existing` refuses goes to `errors`, a world already in `--out` is skipped.
    fn read(text: &str, existing: &mut resume::Existing, errors: &mut Errors) -> Requests {
        let mut seen = HashSet::new();
        let mut requests = Requests {
            lines: 0,
            skipped: 0,
            todo: Vec::new(),
        };
        for (index, text) in text.lines().enumerate() {
            if text.trim().is_empty() {
                continue;
            }
            requests.lines += 1;
            let line = match Line::parse(text, index + 1) {
                Ok(line) => line,
                Err(error) => {
                    errors.record(
                        error.line,
                        error.id.as_deref(),
                        "invalid_line",
                        &error.reason,
                        0,
                    );
                    continue;
                }
            };
            if !seen.insert(line.id.clone()) {
                errors.record(
                    index + 1,
                    Some(&line.id),
                    "duplicate_id",
                    "the id is already used by an earlier line of this file",
                    0,
                );
                continue;
            }
            match existing.check(index + 1, &line) {
                Verdict::Ask => requests.todo.push((index + 1, line)),
                Verdict::Skip => requests.skipped += 1,
                Verdict::Refuse { kind, message } => {
                    errors.record(index + 1, Some(&line.id), kind, &message, 0);
                }
            }
        }
        requests
    }
}

/// What one run asked.
struct Asked {
    /// Worlds written to `--out`.
    collected: usize,
    /// Of them, those that needed more than one attempt.
    retried: usize,
}

/// Asks every request of `todo` on a runtime of its own: a world goes to `out` as its
/// answer arrives, a failure to `errors`; progress on stderr.
fn ask_all(
    args: &CollectArgs,
    collector: Collector,
    todo: Vec<(usize, Line)>,
    concurrency: usize,
    mut out: std::fs::File,
    errors: &mut Errors,
) -> Result<Asked, Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| Error::usage(format!("cannot start the runtime: {error}")))?;
    let progress = Progress::new(todo.len());
    let domain = args.contract.clone();
    let provider = collector.provider().to_string();
    let mut asked = Asked {
        collected: 0,
        retried: 0,
    };
    let written = runtime.block_on(run(
        Arc::new(collector),
        todo,
        concurrency,
        |line, number, result| {
            match result {
                Ok(Collected {
                    request,
                    response,
                    attempts,
                }) => {
                    let world = World {
                        provider: Some(provider.clone()),
                        ..line.world(&domain, request, response)
                    };
                    let text = world.to_line().map_err(|error| error.to_string())?;
                    out.write_all(text.as_bytes())
                        .and_then(|()| out.write_all(b"\n"))
                        .and_then(|()| out.flush())
                        .map_err(|error| format!("cannot write {}: {error}", args.out.display()))?;
                    asked.collected += 1;
                    asked.retried += usize::from(attempts > 1);
                }
                Err(Failure {
                    kind,
                    message,
                    attempts,
                }) => errors.record(number, Some(&line.id), kind, &message, attempts),
            }
            progress.advance(asked.collected, errors.count);
            Ok(())
        },
    ));
    progress.finish(asked.collected, errors.count);
    written.map_err(Error::Failure)?;
    Ok(asked)
}

/// Asks every request, at most `concurrency` at once, and hands each result (in completion
/// order) to `done`; stops at the first error `done` returns.
async fn run(
    collector: Arc<Collector>,
    todo: Vec<(usize, Line)>,
    concurrency: usize,
    mut done: impl FnMut(&Line, usize, Result<Collected, Failure>) -> Result<(), String>,
) -> Result<(), String> {
    let mut lines: Vec<Option<Line>> = Vec::with_capacity(todo.len());
    let mut numbers = Vec::with_capacity(todo.len());
    let mut tasks = tokio::task::JoinSet::new();
    let mut pending = todo.into_iter().enumerate();
    let mut spawn = |tasks: &mut tokio::task::JoinSet<_>,
                     lines: &mut Vec<Option<Line>>,
                     numbers: &mut Vec<usize>| {
        if let Some((slot, (number, line))) = pending.next() {
            let collector = collector.clone();
            let request = line.request.clone();
            lines.push(Some(line));
            numbers.push(number);
            tasks.spawn(async move { (slot, collector.collect(&request).await) });
        }
    };
    for _ in 0..concurrency {
        spawn(&mut tasks, &mut lines, &mut numbers);
    }
    while let Some(joined) = tasks.join_next().await {
        let (slot, result) = joined.map_err(|error| format!("a request task failed: {error}"))?;
        let line = lines[slot].take().ok_or("a request finished twice")?;
        done(&line, numbers[slot], result)?;
        spawn(&mut tasks, &mut lines, &mut numbers);
    }
    Ok(())
}

/// Opens the output for appending; a new file is created with mode 0600.
fn open_out(path: &Path) -> Result<std::fs::File, String> {
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
        .open(path)
        .map_err(|error| format!("cannot open {}: {error}", path.display()))
}

/// The errors file of this run.
struct Errors {
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    count: usize,
    kinds: BTreeMap<&'static str, usize>,
    failed: Option<std::io::Error>,
}

impl Errors {
    fn create(path: &Path) -> Result<Errors, String> {
        let file = std::fs::File::create(path)
            .map_err(|error| format!("cannot create {}: {error}", path.display()))?;
        Ok(Errors {
            path: path.to_path_buf(),
            file: std::io::BufWriter::new(file),
            count: 0,
            kinds: BTreeMap::new(),
            failed: None,
        })
    }

    fn record(
        &mut self,
        line: usize,
        id: Option<&str>,
        kind: &'static str,
        message: &str,
        attempts: u32,
    ) {
        self.count += 1;
        *self.kinds.entry(kind).or_default() += 1;
        let record =
            json!({"line": line, "id": id, "kind": kind, "message": message, "attempts": attempts});
        let written = serde_json::to_writer(&mut self.file, &record)
            .map_err(std::io::Error::other)
            .and_then(|()| self.file.write_all(b"\n"))
            .and_then(|()| self.file.flush());
        if let Err(error) = written {
            self.failed.get_or_insert(error);
        }
    }

    fn finish(&mut self) -> Result<(), String> {
        if let Some(error) = self.failed.take() {
            return Err(format!("cannot write {}: {error}", self.path.display()));
        }
        self.file
            .flush()
            .map_err(|error| format!("cannot write {}: {error}", self.path.display()))
    }
}

/// A progress bar on a terminal, plain lines (about every tenth of the work) otherwise.
struct Progress {
    bar: Option<ProgressBar>,
    total: usize,
    step: usize,
    done: std::cell::Cell<usize>,
}

impl Progress {
    fn new(total: usize) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total as u64);
            if let Ok(style) = ProgressStyle::with_template(
                "{bar:40} {pos}/{len} requests ({per_sec}, eta {eta}) {msg}",
            ) {
                bar.set_style(style);
            }
            bar
        });
        Progress {
            bar,
            total,
            step: total.div_ceil(10).max(1),
            done: std::cell::Cell::new(0),
        }
    }

    fn advance(&self, collected: usize, failed: usize) {
        let done = self.done.get() + 1;
        self.done.set(done);
        match &self.bar {
            Some(bar) => {
                bar.set_position(done as u64);
                bar.set_message(format!("{failed} failed"));
            }
            None if done.is_multiple_of(self.step) && done < self.total => eprintln!(
                "collect: {done}/{} requests, {collected} collected, {failed} failed",
                self.total
            ),
            None => {}
        }
    }

    fn finish(&self, collected: usize, failed: usize) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        eprintln!(
            "collect: {}/{} requests, {collected} collected, {failed} failed",
            self.done.get(),
            self.total
        );
    }
}
