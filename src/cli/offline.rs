//! The offline tools' command glue: argument handling, files, progress bars.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};

use releasegate_core::codebook;
use releasegate_core::contract::{Contract, Shape};
use releasegate_core::workflow;
use releasegate_lab::replay;
use releasegate_sim::dataset;
use releasegate_sim::simulate;
use releasegate_sim::worlds;
use releasegate_sim::worlds::Split;

/// Progress of a long offline run, on stderr: a spinner when stderr is a terminal; otherwise
/// (a CI log, a file, a pipe) plain lines, one per phase and at most one count every
/// [`Progress::EVERY`], so a long run shows it is alive without flooding its log.
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

/// Loads the configuration for an offline tool and picks a contract.
pub(super) fn contract(config: &Path, name: &str) -> Result<Arc<Contract>, String> {
    let config = releasegate_proxy::load::load_offline(Some(config)).map_err(|e| e.to_string())?;
    config.contract(name).cloned().ok_or_else(|| {
        let known: Vec<&str> = config.contracts.keys().map(String::as_str).collect();
        format!("no contract named `{name}` (known: {})", known.join(", "))
    })
}

/// `releasegate replay`.
pub(super) fn replay_command(
    config: &Path,
    contract_name: &str,
    input: &Path,
    output: &Path,
) -> ExitCode {
    let contract = match contract(config, contract_name) {
        Ok(contract) => contract,
        Err(message) => return super::usage_error(&message),
    };
    let reader = match open_worlds(input) {
        Ok(reader) => reader,
        Err(error) => return super::usage_error(&error),
    };
    let mut writer = match create_worlds(output) {
        Ok(writer) => writer,
        Err(error) => return super::usage_error(&error),
    };
    let bar = Progress::new("replay", "worlds");
    let result = replay::replay(&contract, reader, &mut writer, &mut |n| bar.set_position(n));
    bar.finish_and_clear();
    match result {
        Ok(summary) => {
            match serde_json::to_string_pretty(&summary) {
                Ok(text) => println!("{text}"),
                Err(error) => return super::failure(&error),
            }
            if summary.worlds_read == 0 {
                return super::usage_error(&format!(
                    "{} holds no world: expected saved worlds, one JSON object per line (docs/worlds.md)",
                    input.display()
                ));
            }
            if summary.rejected_requests.total == summary.worlds_read {
                return super::usage_error(&format!(
                    "none of the {} worlds fits contract `{contract_name}` (its questions, classes and \
                     pinned text): see rejected_requests above",
                    summary.worlds_read
                ));
            }
            ExitCode::SUCCESS
        }
        Err(error) => super::failure(&error),
    }
}

/// `releasegate simulate`.
pub(super) fn simulate_command(pairs_per_domain: usize, seed: u64, output: &Path) -> ExitCode {
    if pairs_per_domain == 0 {
        return super::usage_error(&"--pairs-per-domain must be at least 1");
    }
    let options = simulate::Options {
        pairs_per_domain,
        seed,
    };
    let mut writer = match create_worlds(output) {
        Ok(writer) => writer,
        Err(error) => return super::usage_error(&error),
    };
    let bar = Progress::new("simulate", "worlds");
    for pair in simulate::Generator::new(&options) {
        let written = pair.map_err(|error| error.to_string()).and_then(|worlds| {
            worlds
                .iter()
                .try_for_each(|w| writer.write(w))
                .map_err(|e| e.to_string())
        });
        if let Err(message) = written {
            bar.finish_and_clear();
            eprintln!("error: {message}");
            return ExitCode::FAILURE;
        }
        bar.set_position(writer.n_written() as u64);
    }
    bar.finish_and_clear();
    if let Err(error) = writer.flush() {
        return super::failure(&error);
    }
    eprintln!(
        "wrote {} worlds to {}",
        writer.n_written(),
        output.display()
    );
    ExitCode::SUCCESS
}

/// Codebooks above this many grid vectors get a warning (mapping scans them).
pub(super) const GRID_WARNING: u128 = 200_000;

/// `build-codebook --budget α [--max-codewords K] [--pair-weight W]`: learn a
/// compact codebook for admissibility budget α.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct LearnOptions {
    /// α.
    pub budget: f64,
    /// K.
    pub max_codewords: usize,
    /// Pair weight of the greedy gain.
    pub pair_weight: u32,
}

/// How the text output names a learned codebook's assignment.
fn assignment_name(assignment: codebook::Assignment) -> String {
    match assignment {
        codebook::Assignment::Coverage => "coverage order".to_string(),
        codebook::Assignment::Priority { split_penalty } => {
            format!("priority, split penalty {split_penalty}")
        }
    }
}

/// `build-codebook --pool`: what a codebook may contain besides the simplex grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Pool {
    /// The grid alone: nothing of the training data is released.
    Grid,
    /// The grid, the training answers verbatim and their pair midpoints.
    #[value(name = "grid+training")]
    GridTraining,
}

/// `build-codebook --denominator D --pool P`: the strict codebook's grid and pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BuildOptions {
    /// The simplex grid's denominator.
    pub denominator: u32,
    /// What the codebook may contain besides the grid.
    pub pool: Pool,
}

/// `releasegate build-codebook`.
///
/// With several contracts the codebook is pooled: their questions must share
/// the class count and the frozen workflows up to labels, training answers of
/// all of them enter in each one's canonical order, and the artifact serves
/// every label set positionally. With `learn`, the strict codebook is the
/// candidate pool of a greedy compact codebook learned on the same train split.
pub(super) fn build_codebook_command(
    config: &Path,
    contract_names: &[String],
    question: &str,
    inputs: &[std::path::PathBuf],
    output: &Path,
    BuildOptions { denominator, pool }: BuildOptions,
    learn: Option<LearnOptions>,
) -> ExitCode {
    let config = match releasegate_proxy::load::load_without_codebooks(config) {
        Ok(config) => config,
        Err(error) => return super::usage_error(&error),
    };
    let mut contracts = Vec::new();
    for name in contract_names {
        let Some(contract) = config.contract(name) else {
            return super::usage_error(&format!("no contract named `{name}`"));
        };
        let Some(rule) = contract.questions.get(question) else {
            return super::usage_error(&format!("contract `{name}` has no question `{question}`"));
        };
        if rule.workflows.is_none() {
            return super::usage_error(&format!(
                "contracts.{name}.questions.{question} has no `workflows` table: a codebook is built for frozen workflows"
            ));
        }
        contracts.push(contract.clone());
    }
    let Some(first) = contracts.first() else {
        return super::usage_error(&"name at least one --contract");
    };
    let rule = &first.questions[question];
    let Some(spec) = rule.workflows.as_ref() else {
        return super::usage_error(&"the question has no workflows");
    };
    let classes = rule.released_labels();
    for contract in &contracts[1..] {
        let other = &contract.questions[question];
        let same = other.released_labels().len() == classes.len()
            && other
                .workflows
                .as_ref()
                .is_some_and(|w| codebook::Codebook::can_pool(spec, w));
        if !same {
            return super::usage_error(&format!(
                "contract `{}` cannot share the codebook: its question needs the same class count and the same frozen workflows as `{}`",
                contract.name, first.name
            ));
        }
    }
    let grid = codebook::grid_size(classes.len(), denominator);
    if grid > GRID_WARNING {
        let suggestion = codebook::largest_denominator_within(classes.len(), GRID_WARNING)
            .map_or_else(String::new, |d| {
                format!("; --denominator {d} keeps it under {GRID_WARNING}")
            });
        eprintln!(
            "warning: the denominator-{denominator} grid has {grid} vectors for {} classes (times 3 confidences){suggestion}",
            classes.len()
        );
    }
    // A capture's rotations are read in the order given, as one file: the codebook records
    // the hash of their concatenation.
    let mut files = Vec::with_capacity(inputs.len());
    for input in inputs {
        match std::fs::read(input) {
            Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => {
                return super::usage_error(&format!(
                    "{} is empty: expected worlds JSONL lines",
                    input.display()
                ));
            }
            Ok(bytes) => files.push((input, bytes)),
            Err(error) => {
                return super::usage_error(&format!("cannot read {}: {error}", input.display()));
            }
        }
    }
    let source_sha256 = {
        let mut all = Vec::new();
        for (_, bytes) in &files {
            all.extend_from_slice(bytes);
            if all.last() != Some(&b'\n') {
                all.push(b'\n');
            }
        }
        if files.len() == 1 {
            // One file: its own hash, whatever its last byte.
            workflow::sha256_hex(&files[0].1)
        } else {
            workflow::sha256_hex(&all)
        }
    };
    let mut training = Vec::new();
    let mut responses = Vec::new();
    // Validation answers choose the learned codebook's assignment (never the test split).
    let mut validation = Vec::new();
    let mut skipped: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let bar = Progress::new("build-codebook", "worlds");
    let mut read = 0u64;
    for (input, bytes) in &files {
        for world in worlds::Reader::new(bytes.as_slice()) {
            let world = match world {
                Ok(world) => world,
                Err(error) => {
                    bar.finish_and_clear();
                    return super::failure_in(input, &error);
                }
            };
            read += 1;
            bar.set_position(read);
            if world.split == Split::Validation && learn.is_some() {
                if let Some((response, _)) = contracts.iter().find_map(|contract| {
                    dataset::training_answer(contract, question, &world, spec).ok()
                }) {
                    validation.push(response);
                }
                continue;
            }
            if world.split != Split::Train {
                continue;
            }
            // The first contract whose request the world fits reads its answer.
            let mut first_skip = None;
            let answer = contracts.iter().find_map(|contract| {
                dataset::training_answer(contract, question, &world, spec)
                    .map_err(|skip| first_skip = first_skip.or(Some(skip)))
                    .ok()
            });
            match answer {
                Some((response, answer)) => {
                    responses.push(response);
                    training.push(answer);
                }
                None => {
                    let reason =
                        first_skip.map_or_else(|| "unknown".to_string(), |skip| skip.to_string());
                    *skipped.entry(reason).or_default() += 1;
                }
            }
        }
    }
    if training.is_empty() {
        bar.finish_and_clear();
        return super::usage_error(&format!(
            "no train-split world of {} fits question `{question}` of {}: a codebook is built from \
             the contract's own native answers (worlds asked with the contract's question, its \
             classes and pinned text, split \"train\"); skipped: {skipped:?}",
            inputs
                .iter()
                .map(|input| input.display().to_string())
                .collect::<Vec<_>>()
                .join(" + "),
            contract_names.join(", ")
        ));
    }
    bar.set_message("building");
    // The training answers always choose and order what is kept (learning, validation); they
    // enter the codebook's own codewords only with --pool grid+training.
    let pooled: &[codebook::TrainingAnswer] = match pool {
        Pool::Grid => &[],
        Pool::GridTraining => &training,
    };
    let built = codebook::build(classes, denominator, spec, pooled, source_sha256);
    bar.finish_and_clear();
    let mut built = match built {
        Ok(built) => built,
        Err(error) => return super::usage_error(&error),
    };
    let others: Vec<Vec<String>> = contracts[1..]
        .iter()
        .map(|c| c.questions[question].released_labels().to_vec())
        .collect();
    built.codebook = match built.codebook.with_other_class_sets(others) {
        Ok(codebook) => codebook,
        Err(error) => return super::usage_error(&error),
    };
    let mut learned = None;
    if let Some(options) = learn {
        let settings = codebook::Settings {
            pair_weight: options.pair_weight,
            ..codebook::Settings::new(options.budget, options.max_codewords)
        };
        match codebook::learn(&built.codebook, spec, &responses, &validation, &settings) {
            Ok((codebook, stats)) => {
                built.codebook = codebook;
                learned = Some(stats);
            }
            Err(error) => return super::usage_error(&error),
        }
    }
    if let Err(error) = releasegate_proxy::load::write_file(output, &built.codebook.to_json_bytes())
    {
        return super::failure(&std::io::Error::new(
            error.kind(),
            format!("cannot write codebook file {}: {error}", output.display()),
        ));
    }
    let class_sets: Vec<&[String]> = built.codebook.class_sets().collect();
    let summary = serde_json::json!({
        "codebook": output.display().to_string(),
        "contracts": contract_names,
        "question": question,
        "class_sets": class_sets,
        "denominator": denominator,
        "pool": match pool {
            Pool::Grid => "grid",
            Pool::GridTraining => "grid+training",
        },
        "training_answers": training.len(),
        "skipped_train_worlds": skipped,
        "workflows_sha256": built.codebook.workflows_sha256(),
        "stats": built.stats,
        "learned": learn.map(|o| serde_json::json!({
            "budget": o.budget,
            "max_codewords": o.max_codewords,
            "pair_weight": o.pair_weight,
            "stats": learned,
        })),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&summary).unwrap_or_default()
    );
    ExitCode::SUCCESS
}

/// Arguments of `releasegate audit`.
#[derive(Debug, clap::Args)]
pub(super) struct AuditArgs {
    /// Configuration file holding the contract(s).
    #[arg(long)]
    pub config: std::path::PathBuf,
    /// The contract; repeat to audit several (each world uses the first that fits).
    #[arg(
        long = "contract",
        required_unless_present = "recipient",
        conflicts_with = "recipient"
    )]
    pub contracts: Vec<String>,
    /// A release every other release is compared with, paired over the same test pairs
    /// (repeatable; `no_output` and `wcpq (contract)` are always references when audited).
    #[arg(long = "compare-to")]
    pub compare_to: Vec<String>,
    /// Audit what one recipient learns: its contracts (each world under the first it fits),
    /// and with --gate also every release it can ask for of the same world, read together.
    #[arg(long)]
    pub recipient: Option<String>,
    /// Labelled worlds (train, validation and test splits).
    #[arg(long)]
    pub worlds: std::path::PathBuf,
    /// Views to study (comma-separated); default all five.
    #[arg(long, value_delimiter = ',')]
    pub views: Option<Vec<String>>,
    /// Extra mechanisms under full_native: quantize[=step], top_k[=k], temperature[=tau], gaussian[=sigma].
    #[arg(long, value_delimiter = ',')]
    pub mechanisms: Vec<String>,
    /// Release every contract in this shape (`complete` or `minimal`) instead of its own.
    #[arg(long)]
    pub shape: Option<String>,
    /// The attacker also reads the complete shape's fills as features (computed
    /// from the released fields, so the same for both shapes).
    #[arg(long)]
    pub read_fills: bool,
    /// Write the full numbers as JSON.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Write the privacy-utility plot as SVG.
    #[arg(long)]
    pub svg: Option<std::path::PathBuf>,
    /// Bootstrap resamples per interval.
    #[arg(long, default_value_t = 2000)]
    pub bootstrap: usize,
    /// Seed of every random choice (bootstrap, noise mechanisms).
    #[arg(long, default_value_t = 20261009)]
    pub seed: u64,
    /// Check every contract's `policy` (KEEP fields released, recovery gain over
    /// no output within `max_recovery_gain`); exit 3 when one fails.
    #[arg(long)]
    pub gate: bool,
    /// Privacy-utility frontier: WCPQ admissibility budgets α to sweep (comma-separated); each
    /// setting learns a compact codebook from the train split in memory and is audited as one
    /// more release. Needs a contract whose question uses WCPQ.
    #[arg(long, value_delimiter = ',')]
    pub budgets: Vec<f64>,
    /// With --budgets: codebook sizes K to sweep (comma-separated; default 128).
    #[arg(long = "max-codewords", value_delimiter = ',', requires = "budgets")]
    pub max_codewords: Vec<usize>,
    /// Report gains even when the pairs fail the input checks (marked as unchecked); without
    /// it such an audit exits 65 and reports nothing.
    #[arg(long = "allow-unpaired")]
    pub allow_unpaired: bool,
    /// Fitting threads (default 0: every core); the results do not depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Exit code of `audit` when its pairs fail the input checks (EX_DATAERR).
pub(super) const EXIT_UNPAIRED: u8 = 65;

/// Exit code of `audit --gate` when a contract fails: it exceeds its leakage budget, drops a
/// KEEP field or has a question that is not certifiable.
pub(super) const EXIT_GATE: u8 = 3;
/// Exit code of `audit --gate` when no contract fails but the data cannot resolve a budget.
pub(super) const EXIT_GATE_INCONCLUSIVE: u8 = 4;

use releasegate_lab::audit::gate::Verdict;

/// `releasegate audit`.
pub(super) fn audit_command(args: &AuditArgs) -> ExitCode {
    let config = match releasegate_proxy::load::load_offline(Some(&args.config)) {
        Ok(config) => config,
        Err(error) => return super::usage_error(&error),
    };
    let shape = match args.shape.as_deref().map(|name| (name, Shape::parse(name))) {
        None => None,
        Some((_, Some(shape))) => Some(shape),
        Some((name, None)) => {
            return super::usage_error(&format!("unknown shape `{name}` (complete or minimal)"));
        }
    };
    let recipient = match &args.recipient {
        None => None,
        Some(name) => match config.recipients.iter().find(|r| &r.name == name) {
            Some(recipient) => Some(recipient),
            None => return super::usage_error(&format!("no recipient named `{name}`")),
        },
    };
    let names: &[String] = recipient.map_or(&args.contracts, |r| &r.contracts);
    let mut contracts = Vec::new();
    for name in names {
        match config.contract(name) {
            Some(contract) => contracts.push(match shape {
                Some(shape) => Arc::new(Contract {
                    shape,
                    ..(**contract).clone()
                }),
                None => contract.clone(),
            }),
            None => return super::usage_error(&format!("no contract named `{name}`")),
        }
    }
    let mut candidates = match audit_candidates(args, &contracts) {
        Ok(candidates) => candidates,
        Err(message) => return super::usage_error(&message),
    };
    if args.budgets.iter().any(|b| !(b.is_finite() && *b >= 0.0)) {
        return super::usage_error(&"--budgets must be finite numbers >= 0");
    }
    let reader = match open_worlds(&args.worlds) {
        Ok(reader) => reader,
        Err(error) => return super::usage_error(&error),
    };
    let bar = Progress::new("audit", "worlds");
    let mut all = Vec::new();
    for world in reader {
        match world {
            Ok(world) => all.push(world),
            Err(error) => {
                bar.finish_and_clear();
                return super::failure(&error);
            }
        }
        bar.set_position(all.len() as u64);
    }
    let mut frontier = Vec::new();
    if !args.budgets.is_empty() {
        bar.set_message("learning codebooks");
        let sizes = if args.max_codewords.is_empty() {
            vec![codebook::DEFAULT_MAX_CODEWORDS]
        } else {
            args.max_codewords.clone()
        };
        match releasegate_lab::audit::frontier::candidates(&contracts, &all, &args.budgets, &sizes)
        {
            Ok(settings) => {
                for (candidate, point) in settings {
                    candidates.push(candidate);
                    frontier.push(point);
                }
            }
            Err(error) => {
                bar.finish_and_clear();
                return super::usage_error(&error);
            }
        }
    }
    bar.set_message("releasing");
    let reading = if args.read_fills {
        releasegate_lab::audit::intake::Reading::WithFills
    } else {
        releasegate_lab::audit::intake::Reading::Released
    };
    let intake =
        releasegate_lab::audit::intake::build(&contracts, &all, &candidates, reading, args.seed);
    let (input, intake) = match intake {
        Ok(built) => built,
        Err(error) => {
            bar.finish_and_clear();
            return super::failure(&error);
        }
    };
    bar.set_message("fitting attackers");
    let mut settings = releasegate_lab::audit::Config {
        seed: args.seed,
        n_bootstrap: args.bootstrap,
        threads: args.threads.unwrap_or(0),
        ..releasegate_lab::audit::Config::default()
    };
    settings.references.extend(args.compare_to.iter().cloned());
    let report = releasegate_lab::audit::run(&input, &settings);
    bar.finish_and_clear();
    let report = match report {
        Ok(report) => report,
        Err(error) => return super::failure(&error),
    };
    let mut checks = input
        .releases
        .first()
        .map(|r| releasegate_lab::audit::checks::pairs(&r.examples))
        .unwrap_or_default();
    releasegate_lab::audit::checks::baseline(&mut checks, &report);
    let unchecked = checks.iter().any(|c| !c.passed());
    for check in &checks {
        if !check.passed() {
            eprintln!(
                "input check: domain {}: {}",
                check.domain,
                check.problems.join("; ")
            );
        }
    }
    if unchecked && !args.allow_unpaired {
        eprintln!(
            "error: the worlds fail the audit's pair checks (see above and docs/pairs.md): a gain \
             over no output assumes pairs of two worlds with the same coarse class and public \
             context and different secrets; fix the pairs, or pass --allow-unpaired to report \
             the figures marked as unchecked"
        );
        return ExitCode::from(EXIT_UNPAIRED);
    }
    if unchecked {
        println!(
            "UNCHECKED INPUT: the pairs fail the checks above; every gain below is reported as asked (--allow-unpaired) and certifies nothing"
        );
    }
    println!("{}", report.to_text());
    print_sample_size(&report, &input, &contracts);
    println!(
        "worlds used: {}; left out: {:?}",
        intake.worlds_used, intake.skipped
    );
    for contract in &contracts {
        let reasons = contract.not_certifiable_reasons();
        if !reasons.is_empty() {
            println!(
                "not certifiable: contract {}: {}; these figures do not cover those questions' releases \
                 as a caller can make them",
                contract.name,
                reasons.join(", ")
            );
        }
    }
    releasegate_lab::audit::frontier::fill(&mut frontier, &report);
    for point in &frontier {
        let worst = point
            .worst_relative_increase
            .values()
            .copied()
            .fold(0.0f64, f64::max);
        println!(
            "frontier {}: codewords {}; covered {}/{} test answers, recovery {}, gain {}, worst per-output increase {:.3} x kappa{}",
            point.release,
            point
                .codebooks
                .iter()
                .map(|c| format!(
                    "{} for {} ({})",
                    c.codewords,
                    c.serves.join("+"),
                    c.assignment
                        .map_or_else(|| "-".to_string(), assignment_name)
                ))
                .collect::<Vec<_>>()
                .join(", "),
            point.covered_test_answers,
            point.test_answers,
            point.recovery.map_or_else(
                || "-".to_string(),
                |e| format!("{:.3} [{:.3}, {:.3}]", e.mean, e.lower, e.upper)
            ),
            point.recovery_gain.map_or_else(
                || "-".to_string(),
                |e| format!("{:.3} [{:.3}, {:.3}]", e.mean, e.lower, e.upper)
            ),
            worst,
            point
                .paired
                .iter()
                .map(|(reference, e)| format!(
                    "; vs {reference} {:+.3} [{:+.3}, {:+.3}]",
                    e.mean, e.lower, e.upper
                ))
                .collect::<String>()
        );
        println!(
            "frontier {}: answers moved per family (of {}): {}",
            point.release,
            point.test_answers,
            point
                .moved
                .iter()
                .map(|(family, n)| format!("{family} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let gate_results = if args.gate {
        let mut results =
            match releasegate_lab::audit::gate::gate(&contracts, &all, reading, &settings) {
                Ok(results) => results,
                Err(message) => {
                    eprintln!("error: {message}");
                    return ExitCode::FAILURE;
                }
            };
        if let Some(recipient) = recipient {
            match releasegate_lab::audit::gate::recipient(
                &recipient.name,
                recipient.policy.as_ref(),
                &contracts,
                &all,
                reading,
                &settings,
            ) {
                Ok(Some(result)) => results.push(result),
                Ok(None) => println!(
                    "gate recipient {}: no budget (neither the recipient nor its contracts declare max_recovery_gain)",
                    recipient.name
                ),
                Err(message) => {
                    eprintln!("error: {message}");
                    return ExitCode::FAILURE;
                }
            }
        }
        Some(results)
    } else {
        None
    };
    for result in gate_results.iter().flatten() {
        let gain = result.recovery_gain.map_or_else(String::new, |g| {
            format!(
                "; recovery gain over no output {:.3} [{:.3}, {:.3}], budget {}",
                g.mean,
                g.lower,
                g.upper,
                result.max_recovery_gain.unwrap_or(0.0)
            )
        });
        let dropped = if result.dropped_keep.is_empty() {
            String::new()
        } else {
            format!("; drops KEEP {}", result.dropped_keep.join(", "))
        };
        let uncertified = if result.not_certifiable.is_empty() {
            String::new()
        } else {
            format!(
                "; not certifiable: {} (caller_text, or box questions the audit does not read; \
                 `audit` without --gate names the reason)",
                result.not_certifiable.join(", ")
            )
        };
        let inconclusive = match (result.verdict, result.pairs, result.pairs_needed) {
            (Verdict::Inconclusive, Some(pairs), Some(needed)) => format!(
                "; the interval is wider than the budget: measured on {pairs} test pairs, \
                 about {needed} would resolve it"
            ),
            (Verdict::Inconclusive, _, _) => {
                "; a budget of 0 cannot be resolved by any amount of data: set a positive one"
                    .to_string()
            }
            _ => String::new(),
        };
        println!(
            "gate {}: {}{gain}{dropped}{uncertified}{inconclusive}",
            result.contract,
            match result.verdict {
                Verdict::Pass => "pass",
                Verdict::Fail => "FAIL",
                Verdict::Inconclusive => "INCONCLUSIVE",
            }
        );
    }
    for (release, outcomes) in &intake.mechanisms {
        if outcomes.keys().any(|k| k != "applied") {
            println!("{release}: {outcomes:?}");
        }
    }
    if let Some(path) = &args.json {
        let value = serde_json::json!({
            "report": report,
            "intake": intake,
            "contracts": names,
            "recipient": args.recipient,
            "attacker_reads_fills": args.read_fills,
            "shapes": contracts
                .iter()
                .map(|c| (c.name.clone(), serde_json::Value::from(c.shape.as_str())))
                .collect::<serde_json::Map<_, _>>(),
            "worlds": args.worlds.display().to_string(),
            "gate": gate_results,
            "frontier": frontier,
            "checks": checks,
            "unchecked": unchecked,
        });
        let text = serde_json::to_string_pretty(&value).unwrap_or_default();
        if let Err(error) = std::fs::write(path, text + "\n") {
            return super::usage_error(&format!("cannot write {}: {error}", path.display()));
        }
    }
    if let Some(path) = &args.svg
        && let Err(error) = std::fs::write(path, releasegate_lab::audit::svg::render(&report))
    {
        return super::usage_error(&format!("cannot write {}: {error}", path.display()));
    }
    let worst = gate_results
        .iter()
        .flatten()
        .map(|result| result.verdict)
        .max()
        .unwrap_or(Verdict::Pass);
    // A gate on unchecked pairs certifies nothing: at best it is inconclusive.
    let worst = if unchecked && gate_results.is_some() {
        worst.max(Verdict::Inconclusive)
    } else {
        worst
    };
    match worst {
        Verdict::Pass => ExitCode::SUCCESS,
        Verdict::Inconclusive => ExitCode::from(EXIT_GATE_INCONCLUSIVE),
        Verdict::Fail => ExitCode::from(EXIT_GATE),
    }
}

/// For each release: the width of its gain interval on the test pairs it was measured on, and
/// the pairs a budget needs (the contracts' smallest `max_recovery_gain`, else 5 points).
fn print_sample_size(
    report: &releasegate_lab::audit::report::Report,
    input: &releasegate_lab::audit::Input,
    contracts: &[Arc<Contract>],
) {
    let pairs: std::collections::BTreeSet<(&str, &str)> = input
        .releases
        .first()
        .map(|r| {
            r.examples
                .iter()
                .filter(|e| e.split == Split::Test)
                .map(|e| (e.domain.as_str(), e.pair_id.as_str()))
                .collect()
        })
        .unwrap_or_default();
    let declared = contracts
        .iter()
        .filter_map(|c| c.policy.as_ref().map(|p| p.max_recovery_gain))
        .filter(|b| *b > 0.0)
        .fold(None, |least: Option<f64>, b| {
            Some(least.map_or(b, |l| l.min(b)))
        });
    let (budget, source) = match declared {
        Some(budget) => (budget, "the contracts' max_recovery_gain"),
        None => (
            0.05,
            "a budget of 5 points (no contract declares max_recovery_gain)",
        ),
    };
    for release in &report.releases {
        let gain = release.pooled.gain;
        let width = gain.upper - gain.lower;
        let needed = releasegate_lab::audit::gate::pairs_needed(width, pairs.len(), budget);
        println!(
            "sample size {}: gain interval {:.1} points wide on {} test pairs; {} of {:.1} points needs {}",
            release.release,
            100.0 * width,
            pairs.len(),
            source,
            100.0 * budget,
            match needed {
                Some(n) if n <= pairs.len() => "no more pairs".to_string(),
                Some(n) => format!("about {n} test pairs"),
                None => "an interval that this data cannot give".to_string(),
            }
        );
    }
}

fn audit_candidates(
    args: &AuditArgs,
    contracts: &[Arc<Contract>],
) -> Result<Vec<releasegate_lab::audit::intake::Candidate>, String> {
    use releasegate_core::contract::View;
    use releasegate_core::mechanism::{Mechanism, Raw};
    use releasegate_lab::audit::intake::Candidate;
    let views: Vec<View> = match &args.views {
        None => View::ALL.to_vec(),
        Some(names) => names
            .iter()
            .map(|name| View::parse(name.trim()).ok_or_else(|| format!("unknown view `{name}`")))
            .collect::<Result<_, _>>()?,
    };
    let mut candidates: Vec<Candidate> = views
        .into_iter()
        .map(|view| Candidate::uniform(view.as_str(), Some(view), Some(Mechanism::None)))
        .collect();
    // The contract's own release, when it is more than a plain view.
    if let Some(rule) = contracts
        .iter()
        .flat_map(|c| c.questions.values())
        .find(|rule| !matches!(rule.mechanism, Mechanism::None))
    {
        candidates.push(Candidate::uniform(
            format!("{} (contract)", rule.mechanism.kind()),
            None,
            None,
        ));
    }
    for spec in &args.mechanisms {
        let raw = Raw::from_spec(spec, args.seed)?;
        let mechanism = Mechanism::from_raw(raw, &[], None, Path::new("."), &|p| std::fs::read(p))
            .map_err(|reason| format!("`{spec}`: {reason}"))?;
        candidates.push(Candidate::uniform(
            spec.trim(),
            Some(View::FullNative),
            Some(mechanism),
        ));
    }
    Ok(candidates)
}

/// Opens a worlds file for streaming reads.
fn open_worlds(path: &Path) -> std::io::Result<worlds::Reader<std::io::BufReader<std::fs::File>>> {
    let file = std::fs::File::open(path).map_err(|error| {
        std::io::Error::new(
            error.kind(),
            format!("cannot open {}: {error}", path.display()),
        )
    })?;
    Ok(worlds::Reader::new(std::io::BufReader::new(file)))
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
