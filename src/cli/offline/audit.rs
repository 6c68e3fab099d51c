//! `releasegate audit`: its arguments, the files it reads and writes, and what it prints
//! (`output`). The statistics, the frontier and the gate are `releasegate_lab::audit`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use releasegate_core::codebook;
use releasegate_core::config::{Config, Recipient};
use releasegate_core::contract::{Contract, Shape};
use releasegate_lab::audit;
use releasegate_lab::audit::checks::DomainCheck;
use releasegate_lab::audit::frontier::Point;
use releasegate_lab::audit::gate::{GateResult, Verdict};
use releasegate_lab::audit::intake::{CandidateRelease, Intake, Reading};
use releasegate_lab::audit::report::Report;
use releasegate_sim::worlds::{self, World};

use super::super::error::{Error, ResultExt};
use super::{Progress, open_worlds};
use output::{SampleSizes, print_frontier, print_gate, print_report, report_json};

mod output;

/// Arguments of `releasegate audit`.
#[derive(Debug, clap::Args)]
pub(in crate::cli) struct AuditArgs {
    /// Configuration file holding the contract(s).
    #[arg(long)]
    pub config: PathBuf,
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
    pub worlds: PathBuf,
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
    pub json: Option<PathBuf>,
    /// Write the privacy-utility plot as SVG.
    #[arg(long)]
    pub svg: Option<PathBuf>,
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
    /// With --gate: write a certificate for every gated contract and recipient that passes
    /// (`DIR/contract-NAME.json`, `DIR/recipient-NAME.json`), for `[server] certificates`.
    #[arg(long = "certificate-dir", requires = "gate")]
    pub certificate_dir: Option<PathBuf>,
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

/// Exit code of `audit --gate` when a contract fails: it exceeds its leakage budget, drops a
/// KEEP field or has a question that is not certifiable.
const EXIT_GATE: u8 = 3;
/// Exit code of `audit --gate` when no contract fails but the data cannot resolve a budget.
const EXIT_GATE_INCONCLUSIVE: u8 = 4;

/// What is audited: the contracts (in the shape asked for) and the recipient they are of.
struct Scope<'c> {
    /// The recipient of `--recipient`.
    recipient: Option<&'c Recipient>,
    /// The contracts' names, as given or as the recipient lists them.
    names: &'c [String],
    /// The contracts, each world released under the first it fits.
    contracts: Vec<Arc<Contract>>,
}

/// What the lab measured.
struct Measured {
    /// The releases' examples.
    input: audit::Input,
    /// Worlds left out and the mechanisms' outcomes.
    intake: Intake,
    /// The report over every candidate release.
    report: Report,
    /// The frontier's settings, filled from `report`.
    frontier: Vec<Point>,
    /// The attacker's reading of a release.
    reading: Reading,
    /// The audit's settings (the gate runs with the same).
    settings: audit::Config,
    /// The workflow floor of every WCPQ question, when there is one.
    floor: Option<audit::floor::Summary>,
}

/// `releasegate audit`.
pub(in crate::cli) fn audit_command(args: &AuditArgs) -> Result<ExitCode, Error> {
    let inputs = [
        (args.worlds.as_path(), "--worlds"),
        (args.config.as_path(), "--config"),
    ];
    for (output, flag) in [(&args.json, "--json"), (&args.svg, "--svg")] {
        if let Some(output) = output {
            super::refuse_overwriting(output, flag, &inputs)?;
        }
    }
    let config = releasegate_proxy::load::load_offline(Some(&args.config)).or_usage()?;
    let scope = scope(args, &config)?;
    if args.certificate_dir.is_some() && args.shape.is_some() {
        return Err(Error::usage(
            "--certificate-dir certifies the contracts as configured: leave out --shape",
        ));
    }
    let candidates = audit::intake::candidates(
        args.views.as_deref(),
        &args.mechanisms,
        &scope.contracts,
        args.seed,
    )
    .or_usage()?;
    if args.budgets.iter().any(|b| !(b.is_finite() && *b >= 0.0)) {
        return Err(Error::usage("--budgets must be finite numbers >= 0"));
    }
    let reader = open_worlds(&args.worlds, &scope.contracts).or_usage()?;
    let bar = Progress::new("audit", "worlds");
    let (worlds, lines) = read_worlds(reader, &bar)?;
    let mut measured = measure(args, &scope.contracts, &worlds, candidates, &bar)?;
    bar.finish_and_clear();
    let read = Read {
        worlds: &worlds,
        lines: &lines,
        contracts: &scope.contracts,
    };
    let (checks, unchecked) = input_checks(&measured, &read, args.allow_unpaired)?;
    let sizes = SampleSizes::new(&measured, &scope);
    print_report(&measured, &scope.contracts, &sizes, unchecked)?;
    audit::frontier::fill(&mut measured.frontier, &measured.report);
    print_frontier(&measured.frontier, measured.floor.as_ref())?;
    let gate_results = if args.gate {
        Some(gate(&scope, &worlds, &measured)?)
    } else {
        None
    };
    print_gate(gate_results.iter().flatten())?;
    if let (Some(dir), Some(results)) = (&args.certificate_dir, &gate_results) {
        certify(dir, &config, results, args, &measured.settings, unchecked)?;
    }
    for (release, outcomes) in &measured.intake.mechanisms {
        if outcomes.keys().any(|k| k != "applied") {
            crate::outln!("{release}: {outcomes:?}")?;
        }
    }
    if let Some(path) = &args.json {
        let value = report_json(
            args,
            &scope,
            &measured,
            &sizes,
            gate_results.as_deref(),
            &checks,
            unchecked,
        );
        let text = serde_json::to_string_pretty(&value).unwrap_or_default();
        write(path, text + "\n")?;
    }
    if let Some(path) = &args.svg {
        write(path, audit::svg::render(&measured.report))?;
    }
    Ok(gate_exit(gate_results.as_deref(), unchecked))
}

/// The contracts of `--contract` or `--recipient`, in the shape of `--shape`.
fn scope<'c>(args: &'c AuditArgs, config: &'c Config) -> Result<Scope<'c>, Error> {
    let shape = match args.shape.as_deref() {
        None => None,
        Some(name) => Some(Shape::parse(name).ok_or_else(|| {
            Error::usage(format!("unknown shape `{name}` (complete or minimal)"))
        })?),
    };
    let recipient = match &args.recipient {
        None => None,
        Some(name) => Some(
            config
                .recipients()
                .iter()
                .find(|r| &r.name == name)
                .ok_or_else(|| Error::usage(format!("no recipient named `{name}`")))?,
        ),
    };
    let names: &[String] = recipient.map_or(&args.contracts, |r| &r.contracts);
    let contracts = names
        .iter()
        .map(|name| {
            let contract = config
                .contract(name)
                .ok_or_else(|| Error::usage(format!("no contract named `{name}`")))?;
            Ok(match shape {
                Some(shape) => Arc::new(contract.with_shape(shape)),
                None => contract.clone(),
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok(Scope {
        recipient,
        names,
        contracts,
    })
}

/// The worlds read, each one's line, and the contracts they are audited under.
struct Read<'a> {
    worlds: &'a [World],
    lines: &'a [usize],
    contracts: &'a [Arc<Contract>],
}

/// Every world of `reader` and its line, counted on `bar`. A pair whose worlds are in different splits
/// fails the pair checks (exit 65) even with `--allow-unpaired`: one of its worlds would be
/// trained on and the other tested, so no figure could be reported, even unchecked.
fn read_worlds(
    reader: worlds::Reader<impl std::io::BufRead>,
    bar: &Progress,
) -> Result<(Vec<World>, Vec<usize>), Error> {
    let mut worlds = Vec::new();
    let mut lines = Vec::new();
    let mut reader = reader;
    while let Some(world) = reader.next() {
        let world = world.map_err(|error| match error {
            worlds::Error::PairAcrossSplits { .. } => Error::Unpaired(format!(
                "input check: {error}: put both worlds of a pair in the same split \
                 (docs/pairs.md)"
            )),
            other => Error::failure(&other),
        })?;
        worlds.push(world);
        lines.push(reader.line());
        bar.set_position(worlds.len() as u64);
    }
    Ok((worlds, lines))
}

/// Learns the frontier's codebooks (with `--budgets`), releases every candidate and fits the
/// attackers.
fn measure(
    args: &AuditArgs,
    contracts: &[Arc<Contract>],
    worlds: &[World],
    mut candidates: Vec<CandidateRelease>,
    bar: &Progress,
) -> Result<Measured, Error> {
    let mut frontier = Vec::new();
    if !args.budgets.is_empty() {
        bar.set_message("learning codebooks");
        let sizes = if args.max_codewords.is_empty() {
            vec![codebook::DEFAULT_MAX_CODEWORDS]
        } else {
            args.max_codewords.clone()
        };
        let settings =
            audit::frontier::candidates(contracts, worlds, &args.budgets, &sizes).or_usage()?;
        for (candidate, point) in settings {
            candidates.push(candidate);
            frontier.push(point);
        }
    }
    bar.set_message("releasing");
    let reading = if args.read_fills {
        Reading::WithFills
    } else {
        Reading::Released
    };
    let (mut input, intake) =
        audit::intake::build(contracts, worlds, &candidates, reading, args.seed).map_err(
            |error| match error {
                audit::intake::Error::Empty => Error::Unpaired(no_labelled_world(worlds)),
                other => Error::failure(&other),
            },
        )?;
    let mut settings = audit::Config {
        seed: args.seed,
        n_bootstrap: args.bootstrap,
        threads: args.threads.unwrap_or(0),
        ..audit::Config::default()
    };
    let floor = match input.releases.first() {
        Some(template) => audit::floor::build(contracts, worlds, template).or_failure()?,
        None => None,
    };
    let questions = floor.map_or_else(Vec::new, |floor| {
        input.releases.push(floor.release);
        input.costs.extend(floor.costs);
        settings.references.push(audit::floor::RELEASE.to_string());
        floor.questions
    });
    settings.references.extend(args.compare_to.iter().cloned());
    bar.set_message("fitting attackers");
    let report = audit::run(&input, &settings).or_failure()?;
    let floor = audit::floor::summarize(&report, &questions);
    Ok(Measured {
        floor,
        input,
        intake,
        report,
        frontier,
        reading,
        settings,
    })
}

/// Why nothing could be audited, and what to do: the audit needs labelled, paired worlds that
/// ask the contract's questions.
fn no_labelled_world(worlds: &[World]) -> String {
    let unlabelled = worlds.iter().filter(|w| w.labels.is_none()).count();
    format!(
        "no labelled world fits the contract(s), so there is nothing to audit ({unlabelled} of \
         {} worlds carry no labels). The audit measures leakage on labelled counterfactual \
         pairs: two worlds per pair_id with the same public context and coarse class and \
         different secrets (labels.T, labels.S, labels.hypotheses), asking the contract's own \
         questions; docs/pairs.md says how to build them. Captured worlds never carry labels: \
         they train codebooks only. Write the pairs into a requests file (pair_id, split, \
         coarse, secret, hypotheses) and ask the provider with `releasegate collect` \
         (docs/collect.md), then audit what it wrote",
        worlds.len()
    )
}

/// The pair checks every gain depends on, each failing one printed on stderr; whether any
/// fails (the figures are then unchecked). Failing pairs end the audit unless
/// `allow_unpaired`.
fn input_checks(
    measured: &Measured,
    read: &Read,
    allow_unpaired: bool,
) -> Result<(Vec<DomainCheck>, bool), Error> {
    let mut checks = measured
        .input
        .releases
        .first()
        .map(|r| audit::checks::pairs(&r.examples))
        .unwrap_or_default();
    audit::checks::baseline(&mut checks, &measured.report);
    let unchecked = checks.iter().any(|c| !c.passed());
    for check in checks.iter().filter(|check| !check.passed()) {
        eprintln!(
            "input check: domain {}: {}",
            check.domain,
            check.problems.join("; ")
        );
        if let Some(pair_id) = &check.first_not_two_worlds {
            eprintln!(
                "input check: pair `{pair_id}`: {}",
                pair_worlds(read, pair_id)
            );
        }
    }
    if unchecked && !allow_unpaired {
        return Err(Error::Unpaired(
            "the worlds fail the audit's pair checks (see above and docs/pairs.md): a gain \
             over no output assumes pairs of two worlds with the same coarse class and public \
             context and different secrets; fix the pairs, or pass --allow-unpaired to report \
             the figures marked as unchecked"
                .to_string(),
        ));
    }
    Ok((checks, unchecked))
}

/// Where the worlds of `pair_id` are and, for each the audit left out, why: a pair the audit
/// reads one world of is most often a pair whose mate's labels the contract cannot read.
fn pair_worlds(read: &Read, pair_id: &str) -> String {
    read.worlds
        .iter()
        .zip(read.lines)
        .filter(|(world, _)| world.pair_id == pair_id)
        .map(|(world, line)| {
            let fate = match audit::intake::left_out(read.contracts, world) {
                Some(reason) => format!("left out ({reason})"),
                None => "audited".to_string(),
            };
            format!("line {line} (world `{}`) {fate}", world.world_id)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `--gate`: every contract's policy, and with `--recipient` the recipient's.
fn gate(scope: &Scope, worlds: &[World], measured: &Measured) -> Result<Vec<GateResult>, Error> {
    let mut results = audit::gate::gate(
        &scope.contracts,
        worlds,
        measured.reading,
        &measured.settings,
    )
    .map_err(Error::Failure)?;
    if let Some(recipient) = scope.recipient {
        let result = audit::gate::recipient(
            &recipient.name,
            recipient.policy.as_ref(),
            &scope.contracts,
            worlds,
            measured.reading,
            &measured.settings,
        )
        .map_err(Error::Failure)?;
        match result {
            Some(result) => results.push(result),
            None => crate::outln!(
                "gate recipient {}: no budget (neither the recipient nor its contracts declare max_recovery_gain)",
                recipient.name
            )?,
        }
    }
    Ok(results)
}

/// `--certificate-dir`: writes the passing results' certificates and names them.
fn certify(
    dir: &Path,
    config: &Config,
    results: &[GateResult],
    args: &AuditArgs,
    settings: &audit::Config,
    unchecked: bool,
) -> Result<(), Error> {
    if unchecked {
        crate::outln!("certificates: none written (the pairs failed the input checks)")?;
        return Ok(());
    }
    let audited = super::certify::Audited {
        worlds: &args.worlds,
        settings,
        recipient: args.recipient.as_deref(),
    };
    let written = super::certify::write(dir, config, results, &audited)?;
    if written.is_empty() {
        crate::outln!("certificates: none written (no gated contract or recipient passed)")?;
    }
    for path in written {
        crate::outln!("certificate: {}", path.display())?;
    }
    Ok(())
}

/// Writes an output file of the audit.
fn write(path: &Path, contents: impl AsRef<[u8]>) -> Result<(), Error> {
    std::fs::write(path, contents)
        .map_err(|error| Error::usage(format!("cannot write {}: {error}", path.display())))
}

/// The exit code of the gate's verdict (0 without `--gate`).
fn gate_exit(gate_results: Option<&[GateResult]>, unchecked: bool) -> ExitCode {
    let Some(results) = gate_results else {
        return ExitCode::SUCCESS;
    };
    match audit::gate::overall(results.iter().map(|result| result.verdict), unchecked) {
        Verdict::Pass => ExitCode::SUCCESS,
        Verdict::Inconclusive => ExitCode::from(EXIT_GATE_INCONCLUSIVE),
        Verdict::Fail => ExitCode::from(EXIT_GATE),
    }
}
