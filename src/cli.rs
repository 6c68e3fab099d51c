//! The `releasegate` command line: the proxy and its offline tools.

mod collect;
mod error;
mod offline;
mod stdout;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use releasegate_proxy::server::{AppState, Application};

use error::{Error, ResultExt};

/// releasegate: a release-sanitizing proxy for typed decision APIs.
#[derive(Debug, Parser)]
#[command(name = "releasegate", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy (public and admin listeners).
    Serve {
        /// Configuration file; without it, config/releasegate.toml or the embedded default.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Log as JSON lines instead of text.
        #[arg(long)]
        log_json: bool,
    },
    /// Run every start-up check of `serve` except binding the ports; print a summary (exit 0 when valid).
    CheckConfig {
        /// Configuration file; without it, config/releasegate.toml or the embedded default.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Check everything but the WCPQ codebooks (and so the certificates), which do not
        /// exist before the first `collect` and `build-codebook`; say what was skipped.
        #[arg(long)]
        no_codebooks: bool,
    },
    /// Read a key on stdin and print its SHA-256 hex for `key_sha256`.
    HashKey,
    /// Write paired counterfactual worlds (TUPLE-Bench design) as JSON Lines.
    Simulate {
        /// Pairs per domain (three domains; the paper's size is 240).
        #[arg(long, default_value_t = 240)]
        pairs_per_domain: usize,
        /// Seed of every random choice.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Output worlds file.
        #[arg(long)]
        out: PathBuf,
    },
    /// Ask a contract's provider every request of a requests file; write the native answers as
    /// worlds (resumable; failures go to an errors file).
    Collect(collect::CollectArgs),
    /// Build the WCPQ codebook of a contract question from the train split of saved worlds.
    BuildCodebook {
        /// Configuration file holding the contract (its codebooks are not loaded).
        #[arg(long)]
        config: PathBuf,
        /// The contract; repeat to pool questions that share the class count and workflows.
        #[arg(long, required = true)]
        contract: Vec<String>,
        /// The question id (it must declare `workflows`).
        #[arg(long)]
        question: String,
        /// The provider whose answers the codebook is built from (default: the contract's
        /// first): worlds naming it, and for the first provider worlds naming none.
        #[arg(long)]
        provider: Option<String>,
        /// Worlds file; only the train split is used. Repeat to read several as one, in the
        /// order given (a capture and its rotations: `--worlds c.jsonl.2 --worlds c.jsonl.1
        /// --worlds c.jsonl`).
        #[arg(long, required = true)]
        worlds: Vec<PathBuf>,
        /// Output codebook artifact (JSON).
        #[arg(long)]
        out: PathBuf,
        /// Simplex grid denominator.
        #[arg(long, default_value_t = 20)]
        denominator: u32,
        /// Learn a compact codebook for this admissibility budget α (greedy coverage of the
        /// train split); without it the strict full codebook is written. The bounded codebook
        /// is written only when it leaks less than the strict one on the validation split
        /// (paired, upper bound below 0); otherwise the strict one is, and the file records
        /// both figures and the choice (`guard`).
        #[arg(long)]
        budget: Option<f64>,
        /// With --budget: keep at most this many codewords (default 128).
        #[arg(long, requires = "budget")]
        max_codewords: Option<usize>,
        /// With --budget: weight of a jointly covered training pair in the greedy gain (default 4).
        #[arg(long, requires = "budget")]
        pair_weight: Option<u32>,
        /// What the codebook may contain: `grid` (the simplex grid only: no training answer
        /// and no pair midpoint goes into a file that is released to others) or
        /// `grid+training` (also the training answers verbatim and their pair midpoints:
        /// derived from data).
        #[arg(long, value_enum, default_value_t = offline::codebook::Pool::Grid)]
        pool: offline::codebook::Pool,
    },
    /// Measure how much each candidate release reveals (secret recovery) and costs (workflow utility).
    Audit(offline::audit::AuditArgs),
    /// Summarize release decision logs: coverage and fallback rates per contract and question,
    /// statuses per recipient.
    Decisions {
        /// Decision log files (rotated ones too, in any order).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print JSON instead of text tables.
        #[arg(long)]
        json: bool,
    },
    /// Apply a contract to every saved answer of a worlds file; print a JSON summary.
    Replay {
        /// Configuration file holding the contract.
        #[arg(long)]
        config: PathBuf,
        /// The contract to apply.
        #[arg(long)]
        contract: String,
        /// Input worlds (JSON Lines).
        #[arg(long)]
        worlds: PathBuf,
        /// Output: the released worlds.
        #[arg(long)]
        out: PathBuf,
    },
}

/// Runs the command line and returns the process exit code: a command's error is printed
/// here, the only place that turns one into its exit code.
pub(crate) fn main() -> ExitCode {
    let cli = Cli::parse();
    run(cli.command).unwrap_or_else(Error::exit)
}

/// Runs one command. Most exit 0 when they succeed; `audit` and `collect` choose their own
/// exit code (the gate's verdict, a partial collection).
fn run(command: Command) -> Result<ExitCode, Error> {
    match command {
        Command::Audit(args) => return offline::audit::audit_command(&args),
        Command::Collect(args) => return collect::collect_command(&args),
        Command::Serve { config, log_json } => serve(config, log_json)?,
        Command::CheckConfig {
            config,
            no_codebooks,
        } => check_config(config.as_deref(), no_codebooks)?,
        Command::Simulate {
            pairs_per_domain,
            seed,
            out,
        } => offline::simulate_command(pairs_per_domain, seed, &out)?,
        Command::BuildCodebook {
            config,
            contract,
            question,
            provider,
            worlds,
            out,
            denominator,
            budget,
            max_codewords,
            pair_weight,
            pool,
        } => offline::codebook::build_codebook_command(&offline::codebook::Args {
            config: &config,
            contracts: &contract,
            question: &question,
            provider: provider.as_deref(),
            worlds: &worlds,
            out: &out,
            build: offline::codebook::BuildOptions { denominator, pool },
            learn: budget.map(|budget| offline::codebook::LearnOptions {
                budget,
                max_codewords: max_codewords
                    .unwrap_or(releasegate_core::codebook::DEFAULT_MAX_CODEWORDS),
                pair_weight: pair_weight.unwrap_or(releasegate_core::codebook::DEFAULT_PAIR_WEIGHT),
            }),
        })?,
        Command::Decisions { files, json } => decisions(&files, json)?,
        Command::Replay {
            config,
            contract,
            worlds,
            out,
        } => offline::replay_command(&config, &contract, &worlds, &out)?,
        Command::HashKey => hash_key()?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `releasegate hash-key`: the SHA-256 hex of the key on stdin (without its line end).
fn hash_key() -> Result<(), Error> {
    let mut key = String::new();
    std::io::stdin()
        .read_to_string(&mut key)
        .map_err(|_| Error::usage("cannot read the key from stdin"))?;
    let key = key.trim_end_matches(['\n', '\r']);
    if key.is_empty() {
        return Err(Error::usage("the key on stdin is empty"));
    }
    crate::outln!("{}", releasegate_proxy::auth::hash_key(key))?;
    Ok(())
}

/// Runs every check `serve` runs before binding its ports: the same loading (provider keys
/// from the environment, codebooks matched to their workflows) and the same start-up
/// (`AppState::prepare`: metrics, HTTP client, providers, key table). With `no_codebooks`,
/// the same without reading the WCPQ codebooks (the summary names what it skipped).
fn check_config(path: Option<&Path>, no_codebooks: bool) -> Result<(), Error> {
    let config = if no_codebooks {
        let default = Path::new(releasegate_proxy::load::DEFAULT_PATH);
        let path = path
            .or_else(|| default.exists().then_some(default))
            .ok_or_else(|| {
                Error::usage(
                    "--no-codebooks checks a configuration file: name it with --config (the \
                     embedded default brings its codebooks)",
                )
            })?;
        releasegate_proxy::load::load_for_collect(path).or_usage()?
    } else {
        releasegate_proxy::load::load(path).or_usage()?
    };
    let summary = config.summary();
    // The budget on request bytes in force on this machine (derived from its memory limit
    // unless set).
    let (_, budget) = releasegate_proxy::memory::budget(config.server());
    AppState::prepare(config)
        .map_err(|error| Error::usage(format!("{:#}", anyhow::Error::new(error))))?;
    crate::out!("{summary}{budget}")?;
    Ok(())
}

/// `releasegate decisions FILE...`: reads every line of every file and prints the summary.
fn decisions(files: &[PathBuf], json: bool) -> Result<(), Error> {
    use std::io::BufRead;
    let mut summary = releasegate_proxy::decisions::summary::Summary::default();
    for path in files {
        let cannot_read = |error: std::io::Error| {
            Error::usage(format!("cannot read {}: {error}", path.display()))
        };
        let file = std::fs::File::open(path).map_err(cannot_read)?;
        let name = path.display().to_string();
        for (index, line) in std::io::BufReader::new(file).split(b'\n').enumerate() {
            let line = line.map_err(cannot_read)?;
            summary.add_line(&name, index + 1, &String::from_utf8_lossy(&line));
        }
    }
    summary.finish();
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&summary).or_failure()?)?;
    } else {
        crate::out!("{}", summary.to_text())?;
    }
    if summary.requests == 0 {
        return Err(Error::usage(format!(
            "no decision line in {} ({} other lines): expected the JSON lines [decision_log] writes, one per request",
            files
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            summary.invalid_count
        )));
    }
    Ok(())
}

fn serve(config: Option<PathBuf>, log_json: bool) -> Result<(), Error> {
    releasegate_proxy::telemetry::init(log_json);
    let result = serve_with_logs(config);
    // Access lines are written in batches: the last ones go out before the exit.
    releasegate_proxy::telemetry::flush();
    result
}

fn serve_with_logs(config: Option<PathBuf>) -> Result<(), Error> {
    raise_open_file_limit();
    let config = releasegate_proxy::load::load(config.as_deref()).or_usage()?;
    // Before anything starts (`AppState::prepare` refuses it too, for check-config and reloads).
    if let Some(refusal) = releasegate_proxy::demo::exposed(&config) {
        return Err(Error::usage(refusal));
    }
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    let runtime =
        runtime().map_err(|error| Error::usage(format!("cannot start the runtime: {error}")))?;
    let result = runtime.block_on(async {
        // Before anything else: from here on SIGHUP can no longer end the process.
        let signals = Signals::install()?;
        let app = Application::build(config).await?;
        let state = app.state().clone();
        app.run_until_stopped(signals.until_stop(state)).await?;
        anyhow::Ok(())
    });
    // Connections still open past the grace were dropped; don't wait on stragglers.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    releasegate_proxy::telemetry::flush();
    result.map_err(|error| Error::Failure(format!("{error:#}")))
}

/// The runtime `serve` runs on: single-threaded, the first event loop (the
/// server starts one thread per further loop, see `server.worker_threads`).
/// Its blocking pool takes heavy WCPQ mappings.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// Raises the soft open-file limit to the hard one: every client connection
/// and every upstream connection is a file descriptor.
fn raise_open_file_limit() {
    #[cfg(unix)]
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(error) => tracing::warn!(%error, "cannot raise the open-file limit"),
    }
}

/// What a signal asks of the running proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// Drain and exit (SIGTERM, SIGINT / ctrl-c).
    Stop(&'static str),
    /// SIGHUP: reload the configuration.
    Reload,
}

/// The process's signal handlers, installed once at start-up so that no
/// signal takes its default action (SIGHUP would end the process).
struct Signals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    #[cfg(unix)]
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    #[cfg(not(unix))]
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {})
    }

    /// The next signal. A stream that ended (it never does) is ignored.
    #[cfg(unix)]
    async fn next(&mut self) -> Event {
        tokio::select! {
            Some(()) = self.terminate.recv() => Event::Stop("SIGTERM"),
            Some(()) = self.interrupt.recv() => Event::Stop("SIGINT"),
            Some(()) = self.hangup.recv() => Event::Reload,
        }
    }

    #[cfg(not(unix))]
    async fn next(&mut self) -> Event {
        match tokio::signal::ctrl_c().await {
            Ok(()) => Event::Stop("ctrl-c"),
            Err(_) => std::future::pending().await,
        }
    }

    /// Handles signals until one asks to stop: SIGHUP reloads the configuration of
    /// `state` (off the async workers; reloads run one at a time, and the outcome is
    /// logged and counted). Later signals find the handlers still installed and are
    /// ignored: the drain is bounded by `server.shutdown_grace_ms` (SIGKILL ends it at once).
    async fn until_stop(mut self, state: AppState) {
        loop {
            match self.next().await {
                Event::Stop(signal) => {
                    tracing::info!(signal, "shutdown signal received; draining");
                    return;
                }
                Event::Reload => {
                    tracing::info!(signal = "SIGHUP", "reloading the configuration");
                    let state = state.clone();
                    tokio::task::spawn_blocking(move || state.reload());
                }
            }
        }
    }
}
